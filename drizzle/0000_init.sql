CREATE TABLE `memberships` (
	`org_id` text NOT NULL,
	`user_id` text NOT NULL,
	`role` text NOT NULL,
	`created_at` integer NOT NULL,
	PRIMARY KEY(`org_id`, `user_id`),
	FOREIGN KEY (`org_id`) REFERENCES `orgs`(`id`) ON UPDATE no action ON DELETE cascade,
	FOREIGN KEY (`user_id`) REFERENCES `users`(`id`) ON UPDATE no action ON DELETE cascade,
	CONSTRAINT "memberships_role_check" CHECK("memberships"."role" in ('admin', 'member'))
);
--> statement-breakpoint
CREATE TABLE `orgs` (
	`id` text PRIMARY KEY NOT NULL,
	`slug` text NOT NULL,
	`created_at` integer NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `orgs_slug_unique` ON `orgs` (`slug`);--> statement-breakpoint
CREATE TABLE `plans` (
	`org_id` text PRIMARY KEY NOT NULL,
	`token_limit` integer,
	`compute_minutes` integer,
	`weekly_compute_minutes` integer,
	`spend_cap_usd` real,
	`max_concurrent` integer,
	`payment_method` text DEFAULT 'none' NOT NULL,
	`updated_at` integer NOT NULL,
	FOREIGN KEY (`org_id`) REFERENCES `orgs`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE TABLE `projects` (
	`id` text PRIMARY KEY NOT NULL,
	`org_id` text NOT NULL,
	`name` text NOT NULL,
	`repo_owner` text,
	`repo_name` text,
	`created_at` integer NOT NULL,
	FOREIGN KEY (`org_id`) REFERENCES `orgs`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE UNIQUE INDEX `projects_org_name_idx` ON `projects` (`org_id`,`name`);--> statement-breakpoint
CREATE TABLE `user_tokens` (
	`token_hash` text PRIMARY KEY NOT NULL,
	`user_id` text NOT NULL,
	`created_at` integer NOT NULL,
	`expires_at` integer,
	`revoked_at` integer,
	FOREIGN KEY (`user_id`) REFERENCES `users`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE INDEX `user_tokens_user_idx` ON `user_tokens` (`user_id`);--> statement-breakpoint
CREATE TABLE `users` (
	`id` text PRIMARY KEY NOT NULL,
	`email` text NOT NULL,
	`name` text,
	`avatar_url` text,
	`created_at` integer NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `users_email_unique` ON `users` (`email`);--> statement-breakpoint
CREATE TABLE `session_events` (
	`session_id` text NOT NULL,
	`seq` integer NOT NULL,
	`turn` integer NOT NULL,
	`kind` text NOT NULL,
	`type` text NOT NULL,
	`data` text NOT NULL,
	`created_at` integer NOT NULL,
	FOREIGN KEY (`session_id`) REFERENCES `sessions`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE UNIQUE INDEX `session_events_seq_idx` ON `session_events` (`session_id`,`seq`);--> statement-breakpoint
CREATE TABLE `session_snapshots` (
	`session_id` text PRIMARY KEY NOT NULL,
	`machine_version` integer NOT NULL,
	`snapshot` text NOT NULL,
	`version` integer NOT NULL,
	FOREIGN KEY (`session_id`) REFERENCES `sessions`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE TABLE `session_transcript_lines` (
	`session_id` text NOT NULL,
	`line_no` integer NOT NULL,
	`turn` integer NOT NULL,
	`line` text NOT NULL,
	FOREIGN KEY (`session_id`) REFERENCES `sessions`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE UNIQUE INDEX `session_transcript_lines_idx` ON `session_transcript_lines` (`session_id`,`line_no`);--> statement-breakpoint
CREATE TABLE `sessions` (
	`id` text PRIMARY KEY NOT NULL,
	`org_id` text NOT NULL,
	`project_id` text,
	`started_by_user_id` text,
	`api_key_id` text,
	`kind` text DEFAULT 'cloud' NOT NULL,
	`agent` text NOT NULL,
	`harness` text NOT NULL,
	`harness_version_requested` text,
	`harness_version_resolved` text,
	`status` text NOT NULL,
	`mode` text NOT NULL,
	`persistence_mode` text NOT NULL,
	`machine_state` text,
	`sandbox_generation` integer DEFAULT 0 NOT NULL,
	`prompt` text NOT NULL,
	`title` text NOT NULL,
	`repo_owner` text,
	`repo_name` text,
	`branch` text,
	`base_branch` text,
	`on_pr` integer,
	`pr_url` text,
	`summary` text,
	`error` text,
	`model` text NOT NULL,
	`requested_model` text,
	`effort` text,
	`speed` text,
	`account_id` text,
	`output_schema` text,
	`input_tokens` integer,
	`output_tokens` integer,
	`cache_read_tokens` integer,
	`cache_write_tokens` integer,
	`reasoning_tokens` integer,
	`total_tokens` integer,
	`total_cost_usd` real,
	`tool_calls_count` integer,
	`tool_errors_count` integer,
	`turns_count` integer DEFAULT 0 NOT NULL,
	`files_produced` integer,
	`artifact_count` integer DEFAULT 0 NOT NULL,
	`session_capture` text,
	`effective_config` text,
	`harness_session_id` text,
	`result_text` text,
	`result_structured` text,
	`schema_valid` integer,
	`has_result` integer DEFAULT false NOT NULL,
	`completed_at` integer,
	`created_at` integer NOT NULL,
	`updated_at` integer NOT NULL,
	FOREIGN KEY (`org_id`) REFERENCES `orgs`(`id`) ON UPDATE no action ON DELETE cascade,
	FOREIGN KEY (`project_id`) REFERENCES `projects`(`id`) ON UPDATE no action ON DELETE set null,
	FOREIGN KEY (`started_by_user_id`) REFERENCES `users`(`id`) ON UPDATE no action ON DELETE set null,
	CONSTRAINT "sessions_status_check" CHECK(status in ('queued', 'allocating', 'running', 'paused', 'input_required', 'needs_review', 'completed', 'failed', 'cancelled', 'expired'))
);
--> statement-breakpoint
CREATE INDEX `sessions_org_created_idx` ON `sessions` (`org_id`,`created_at`);--> statement-breakpoint
CREATE INDEX `sessions_project_created_idx` ON `sessions` (`project_id`,`created_at`);--> statement-breakpoint
CREATE INDEX `sessions_status_idx` ON `sessions` (`status`);