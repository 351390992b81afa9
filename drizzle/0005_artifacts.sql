CREATE TABLE `artifacts` (
	`session_id` text NOT NULL,
	`name` text NOT NULL,
	`ordinal` integer NOT NULL,
	`size` integer NOT NULL,
	`content_type` text NOT NULL,
	`sha256` text NOT NULL,
	`turn` integer NOT NULL,
	`created_at` integer NOT NULL,
	`updated_at` integer NOT NULL,
	PRIMARY KEY(`session_id`, `name`),
	FOREIGN KEY (`session_id`) REFERENCES `sessions`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE UNIQUE INDEX `artifacts_ordinal_idx` ON `artifacts` (`session_id`,`ordinal`);