CREATE TABLE `session_search_docs` (
	`key` integer PRIMARY KEY NOT NULL,
	`session_id` text NOT NULL,
	`message_count` integer DEFAULT 0 NOT NULL,
	FOREIGN KEY (`session_id`) REFERENCES `sessions`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE UNIQUE INDEX `session_search_docs_session_id_unique` ON `session_search_docs` (`session_id`);