CREATE TABLE `github_installations` (
	`id` text PRIMARY KEY NOT NULL,
	`org_id` text NOT NULL,
	`installation_id` integer NOT NULL,
	`account` text NOT NULL,
	`created_at` integer NOT NULL,
	FOREIGN KEY (`org_id`) REFERENCES `orgs`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE UNIQUE INDEX `github_installations_installation_idx` ON `github_installations` (`installation_id`);--> statement-breakpoint
ALTER TABLE `projects` ADD `github_installation` text;--> statement-breakpoint
ALTER TABLE `sessions` ADD `github_installation` text;