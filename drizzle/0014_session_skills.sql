CREATE TABLE `session_skills` (
	`session_id` text NOT NULL,
	`position` integer NOT NULL,
	`name` text NOT NULL,
	`url` text NOT NULL,
	`commit` text,
	`files` text NOT NULL,
	PRIMARY KEY(`session_id`, `position`),
	FOREIGN KEY (`session_id`) REFERENCES `sessions`(`id`) ON UPDATE no action ON DELETE cascade
);
