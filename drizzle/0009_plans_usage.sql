CREATE TABLE `usage_records` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`org_id` text NOT NULL,
	`session_id` text NOT NULL,
	`at` integer NOT NULL,
	`tokens` integer DEFAULT 0 NOT NULL,
	`spend_usd` real DEFAULT 0 NOT NULL,
	`compute_ms` integer DEFAULT 0 NOT NULL,
	FOREIGN KEY (`org_id`) REFERENCES `orgs`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE INDEX `usage_records_org_at_idx` ON `usage_records` (`org_id`,`at`);--> statement-breakpoint
ALTER TABLE `plans` ADD `cleared` integer DEFAULT false NOT NULL;--> statement-breakpoint
ALTER TABLE `sessions` ADD `running_since` integer;