ALTER TABLE `sessions` ADD `forked_from_session` text;--> statement-breakpoint
ALTER TABLE `sessions` ADD `forked_from_turn` integer;--> statement-breakpoint
ALTER TABLE `sessions` ADD `forked_conversation` integer;--> statement-breakpoint
CREATE INDEX `sessions_forked_from_idx` ON `sessions` (`forked_from_session`);