CREATE TABLE `project_connections` (
	`project_id` text NOT NULL,
	`connection_id` text NOT NULL,
	`name` text NOT NULL,
	`attached_at` integer NOT NULL,
	PRIMARY KEY(`project_id`, `connection_id`),
	FOREIGN KEY (`project_id`) REFERENCES `projects`(`id`) ON UPDATE no action ON DELETE cascade,
	FOREIGN KEY (`connection_id`) REFERENCES `connections`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE UNIQUE INDEX `project_connections_name` ON `project_connections` (`project_id`,`name`);--> statement-breakpoint
ALTER TABLE `session_connections` ADD `from_project` integer DEFAULT false NOT NULL;