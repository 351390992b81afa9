CREATE TABLE `nodes` (
	`name` text PRIMARY KEY NOT NULL,
	`url` text NOT NULL,
	`max_sandboxes` integer NOT NULL,
	`primary_since` integer,
	`heard_at` integer NOT NULL
);
