ALTER TABLE `connections` ADD `connector` text;--> statement-breakpoint
ALTER TABLE `connections` ADD `sealed_oauth` text;--> statement-breakpoint
ALTER TABLE `connections` ADD `oauth_state` text;--> statement-breakpoint
ALTER TABLE `connections` ADD `token_expires_at` integer;--> statement-breakpoint
CREATE UNIQUE INDEX `connections_oauth_state` ON `connections` (`oauth_state`);