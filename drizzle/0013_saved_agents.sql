CREATE TABLE `saved_agent_revisions` (
	`agent_id` text NOT NULL,
	`revision` integer NOT NULL,
	`config` text NOT NULL,
	`digest` text NOT NULL,
	`catalog_revision` text NOT NULL,
	`created_by_user_id` text,
	`created_at` integer NOT NULL,
	PRIMARY KEY(`agent_id`, `revision`),
	FOREIGN KEY (`agent_id`) REFERENCES `saved_agents`(`id`) ON UPDATE no action ON DELETE cascade,
	FOREIGN KEY (`created_by_user_id`) REFERENCES `users`(`id`) ON UPDATE no action ON DELETE set null
);
--> statement-breakpoint
CREATE TABLE `saved_agents` (
	`id` text PRIMARY KEY NOT NULL,
	`org_id` text NOT NULL,
	`name` text NOT NULL,
	`revision` integer NOT NULL,
	`created_by_user_id` text,
	`created_at` integer NOT NULL,
	`updated_at` integer NOT NULL,
	FOREIGN KEY (`org_id`) REFERENCES `orgs`(`id`) ON UPDATE no action ON DELETE cascade,
	FOREIGN KEY (`created_by_user_id`) REFERENCES `users`(`id`) ON UPDATE no action ON DELETE set null
);
--> statement-breakpoint
CREATE INDEX `saved_agents_org_idx` ON `saved_agents` (`org_id`);--> statement-breakpoint
ALTER TABLE `sessions` ADD `profile_id` text;--> statement-breakpoint
ALTER TABLE `sessions` ADD `profile_revision` integer;--> statement-breakpoint
ALTER TABLE `sessions` ADD `profile_digest` text;--> statement-breakpoint
ALTER TABLE `sessions` ADD `agent_profile` text;--> statement-breakpoint
ALTER TABLE `sessions` ADD `snapshot` text;--> statement-breakpoint
ALTER TABLE `sessions` ADD `requested_overrides` text;--> statement-breakpoint
ALTER TABLE `sessions` ADD `effective` text;