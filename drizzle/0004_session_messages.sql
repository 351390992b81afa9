CREATE TABLE `session_messages` (
	`id` text PRIMARY KEY NOT NULL,
	`session_id` text NOT NULL,
	`seq` integer NOT NULL,
	`content` text NOT NULL,
	`status` text NOT NULL,
	`turn` integer,
	`created_at` integer NOT NULL,
	`delivered_at` integer,
	FOREIGN KEY (`session_id`) REFERENCES `sessions`(`id`) ON UPDATE no action ON DELETE cascade,
	CONSTRAINT "session_messages_status_check" CHECK("session_messages"."status" in ('queued', 'delivered', 'dropped'))
);
--> statement-breakpoint
CREATE UNIQUE INDEX `session_messages_seq_idx` ON `session_messages` (`session_id`,`seq`);