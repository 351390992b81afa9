-- Org-wide search (issue 7), second layout; described in src/db/schema/search.ts. 0003_search kept
-- one full-text document per session and re-indexed all of it on every message, so a message cost
-- grew with the transcript. Here every piece of text is its own contentless FTS5 row and a message
-- costs one row, however long the session is: rowid = doc * 2^32 + seq (seq 0: title and prompt;
-- seq n: the `message` event with that seq). `doc` numbers sessions in creation order.
DROP TRIGGER `sessions_search_insert`;
--> statement-breakpoint
DROP TRIGGER `sessions_search_before_update`;
--> statement-breakpoint
DROP TRIGGER `sessions_search_after_update`;
--> statement-breakpoint
DROP TRIGGER `sessions_search_delete`;
--> statement-breakpoint
DROP TRIGGER `session_events_search_insert`;
--> statement-breakpoint
DROP TRIGGER `session_events_search_before_delete`;
--> statement-breakpoint
DROP TRIGGER `session_events_search_after_delete`;
--> statement-breakpoint
DROP VIEW `session_search_text`;
--> statement-breakpoint
DROP TABLE `session_fts`;
--> statement-breakpoint
CREATE TABLE `__new_session_search_docs` (
	`doc` integer PRIMARY KEY NOT NULL,
	`key` integer NOT NULL,
	`session_id` text NOT NULL,
	`org_id` text NOT NULL,
	`message_count` integer DEFAULT 0 NOT NULL,
	FOREIGN KEY (`session_id`) REFERENCES `sessions`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
-- Keys already follow creation order (each new key is larger than every other): doc follows them.
INSERT INTO `__new_session_search_docs` (`doc`, `key`, `session_id`, `org_id`, `message_count`)
  SELECT row_number() OVER (ORDER BY d.`key`), d.`key`, d.`session_id`, s.`org_id`, d.`message_count`
  FROM `session_search_docs` d JOIN `sessions` s ON s.`id` = d.`session_id`;
--> statement-breakpoint
DROP TABLE `session_search_docs`;
--> statement-breakpoint
ALTER TABLE `__new_session_search_docs` RENAME TO `session_search_docs`;
--> statement-breakpoint
CREATE UNIQUE INDEX `session_search_docs_key_unique` ON `session_search_docs` (`key`);
--> statement-breakpoint
CREATE UNIQUE INDEX `session_search_docs_session_id_unique` ON `session_search_docs` (`session_id`);
--> statement-breakpoint
-- contentless_delete: a row is removed by its rowid alone (no need to hand FTS5 the old text), and
-- removing a rowid that is not there does nothing, so no order of deletes can corrupt the index.
CREATE VIRTUAL TABLE `session_fts` USING fts5(body, content='', contentless_delete=1, tokenize='unicode61 remove_diacritics 2');
--> statement-breakpoint
-- The searchable rows, one definition for the backfill below (and for checking the index); the
-- triggers below write the same rows one at a time. A message without content has no row.
CREATE VIEW `session_search_rows` AS
  SELECT d.`doc`, d.`session_id`, 0 AS `seq`, s.`title` || char(10) || s.`prompt` AS `body`
  FROM `session_search_docs` d JOIN `sessions` s ON s.`id` = d.`session_id`
  UNION ALL
  SELECT d.`doc`, d.`session_id`, e.`seq`, e.`data` ->> '$.content'
  FROM `session_search_docs` d JOIN `session_events` e ON e.`session_id` = d.`session_id`
  WHERE e.`kind` = 'harness' AND e.`type` = 'message' AND json_valid(e.`data`) AND e.`seq` BETWEEN 1 AND 4294967295
    AND (e.`data` ->> '$.content') IS NOT NULL;
--> statement-breakpoint
INSERT INTO `session_fts` (rowid, body) SELECT (`doc` << 32) | `seq`, `body` FROM `session_search_rows` ORDER BY `doc`, `seq`;
--> statement-breakpoint
CREATE TRIGGER `sessions_search_insert` AFTER INSERT ON `sessions` BEGIN
  -- The next key at or after this millisecond's first one: created_at order, then insertion order.
  INSERT INTO `session_search_docs` (`doc`, `key`, `session_id`, `org_id`) VALUES (
    coalesce((SELECT max(`doc`) FROM `session_search_docs`), 0) + 1,
    coalesce((SELECT max(`key`) + 1 FROM `session_search_docs` WHERE `key` >= new.`created_at` << 11), new.`created_at` << 11),
    new.`id`,
    new.`org_id`
  );
  INSERT INTO `session_fts` (rowid, body) VALUES (last_insert_rowid() << 32, new.`title` || char(10) || new.`prompt`);
END;
--> statement-breakpoint
CREATE TRIGGER `sessions_search_update` AFTER UPDATE OF `title`, `prompt` ON `sessions`
WHEN old.`title` IS NOT new.`title` OR old.`prompt` IS NOT new.`prompt` BEGIN
  DELETE FROM `session_fts` WHERE rowid = (SELECT `doc` << 32 FROM `session_search_docs` WHERE `session_id` = new.`id`);
  INSERT INTO `session_fts` (rowid, body)
    SELECT `doc` << 32, new.`title` || char(10) || new.`prompt` FROM `session_search_docs` WHERE `session_id` = new.`id`;
END;
--> statement-breakpoint
-- Sessions do not move between orgs today; this keeps org isolation exact if one ever does.
CREATE TRIGGER `sessions_search_org` AFTER UPDATE OF `org_id` ON `sessions` WHEN old.`org_id` IS NOT new.`org_id` BEGIN
  UPDATE `session_search_docs` SET `org_id` = new.`org_id` WHERE `session_id` = new.`id`;
END;
--> statement-breakpoint
-- All of the session's rows, before the cascade removes its events and its session_search_docs row.
CREATE TRIGGER `sessions_search_delete` BEFORE DELETE ON `sessions` BEGIN
  DELETE FROM `session_fts` WHERE rowid BETWEEN
    (SELECT `doc` << 32 FROM `session_search_docs` WHERE `session_id` = old.`id`) AND
    (SELECT (`doc` << 32) | 4294967295 FROM `session_search_docs` WHERE `session_id` = old.`id`);
END;
--> statement-breakpoint
-- One message, one row: the same work for the first message of a session and its ten-thousandth.
CREATE TRIGGER `session_events_search_insert` AFTER INSERT ON `session_events`
WHEN new.`kind` = 'harness' AND new.`type` = 'message' AND json_valid(new.`data`) BEGIN
  UPDATE `session_search_docs` SET `message_count` = `message_count` + 1 WHERE `session_id` = new.`session_id`;
  INSERT INTO `session_fts` (rowid, body)
    SELECT (`doc` << 32) | new.`seq`, new.`data` ->> '$.content' FROM `session_search_docs`
    WHERE `session_id` = new.`session_id` AND new.`seq` BETWEEN 1 AND 4294967295 AND (new.`data` ->> '$.content') IS NOT NULL;
END;
--> statement-breakpoint
-- Events are not rewritten today; this keeps the index exact if one ever is.
CREATE TRIGGER `session_events_search_update` AFTER UPDATE OF `session_id`, `seq`, `kind`, `type`, `data` ON `session_events`
WHEN (old.`kind` = 'harness' AND old.`type` = 'message' AND json_valid(old.`data`))
  OR (new.`kind` = 'harness' AND new.`type` = 'message' AND json_valid(new.`data`)) BEGIN
  UPDATE `session_search_docs` SET `message_count` = `message_count` - 1
    WHERE `session_id` = old.`session_id` AND old.`kind` = 'harness' AND old.`type` = 'message' AND json_valid(old.`data`);
  DELETE FROM `session_fts` WHERE old.`seq` BETWEEN 1 AND 4294967295
    AND rowid = (SELECT (`doc` << 32) | old.`seq` FROM `session_search_docs` WHERE `session_id` = old.`session_id`);
  UPDATE `session_search_docs` SET `message_count` = `message_count` + 1
    WHERE `session_id` = new.`session_id` AND new.`kind` = 'harness' AND new.`type` = 'message' AND json_valid(new.`data`);
  INSERT INTO `session_fts` (rowid, body)
    SELECT (`doc` << 32) | new.`seq`, new.`data` ->> '$.content' FROM `session_search_docs`
    WHERE `session_id` = new.`session_id` AND new.`kind` = 'harness' AND new.`type` = 'message' AND json_valid(new.`data`)
      AND new.`seq` BETWEEN 1 AND 4294967295 AND (new.`data` ->> '$.content') IS NOT NULL;
END;
--> statement-breakpoint
-- A lone delete; when the session goes, its own trigger has removed the rows and this does nothing.
CREATE TRIGGER `session_events_search_delete` AFTER DELETE ON `session_events`
WHEN old.`kind` = 'harness' AND old.`type` = 'message' AND json_valid(old.`data`) BEGIN
  UPDATE `session_search_docs` SET `message_count` = `message_count` - 1 WHERE `session_id` = old.`session_id`;
  DELETE FROM `session_fts` WHERE old.`seq` BETWEEN 1 AND 4294967295
    AND rowid = (SELECT (`doc` << 32) | old.`seq` FROM `session_search_docs` WHERE `session_id` = old.`session_id`);
END;
