CREATE TABLE `project_environments` (
	`project_id` text PRIMARY KEY NOT NULL,
	`setup` text,
	`setup_timeout_s` integer NOT NULL,
	`allow` text NOT NULL,
	`revision` integer NOT NULL,
	`updated_at` integer NOT NULL,
	FOREIGN KEY (`project_id`) REFERENCES `projects`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE TABLE `project_prebuilds` (
	`id` text PRIMARY KEY NOT NULL,
	`project_id` text NOT NULL,
	`revision` integer NOT NULL,
	`commit` text NOT NULL,
	`secrets_digest` text NOT NULL,
	`created_at` integer NOT NULL,
	FOREIGN KEY (`project_id`) REFERENCES `projects`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE INDEX `project_prebuilds_key_idx` ON `project_prebuilds` (`project_id`,`revision`,`commit`,`secrets_digest`);--> statement-breakpoint
CREATE TABLE `project_secrets` (
	`project_id` text NOT NULL,
	`name` text NOT NULL,
	`sealed` text NOT NULL,
	`updated_at` integer NOT NULL,
	PRIMARY KEY(`project_id`, `name`),
	FOREIGN KEY (`project_id`) REFERENCES `projects`(`id`) ON UPDATE no action ON DELETE cascade
);
