-- Org isolation inside the full-text index (issue 12): every row of `session_fts` also holds its
-- session's org as one token in a second column, `org` ('o' and the org id's UTF-8 bytes in hex, a
-- single unicode61 token whatever the id holds). A search asks FTS5 for `org : <token> AND body :
-- <phrase>`, so the index itself walks only the org's rows and never hands another org's row to
-- the query. Layout and rowids are those of 0006_search_rows; see src/db/schema/search.ts.
DROP TRIGGER `sessions_search_insert`;
--> statement-breakpoint
DROP TRIGGER `sessions_search_update`;
--> statement-breakpoint
DROP TRIGGER `sessions_search_org`;
--> statement-breakpoint
DROP TRIGGER `session_events_search_insert`;
--> statement-breakpoint
DROP TRIGGER `session_events_search_update`;
--> statement-breakpoint
DROP VIEW `session_search_rows`;
--> statement-breakpoint
DROP TABLE `session_fts`;
--> statement-breakpoint
CREATE VIRTUAL TABLE `session_fts` USING fts5(body, org, content='', contentless_delete=1, tokenize='unicode61 remove_diacritics 2');
--> statement-breakpoint
-- The searchable rows with their org token, one definition for the backfill below (and for
-- checking the index); the triggers below write the same rows one at a time.
CREATE VIEW `session_search_rows` AS
  SELECT d.`doc`, d.`session_id`, 0 AS `seq`, s.`title` || char(10) || s.`prompt` AS `body`, 'o' || lower(hex(d.`org_id`)) AS `org`
  FROM `session_search_docs` d JOIN `sessions` s ON s.`id` = d.`session_id`
  UNION ALL
  SELECT d.`doc`, d.`session_id`, e.`seq`, e.`data` ->> '$.content', 'o' || lower(hex(d.`org_id`))
  FROM `session_search_docs` d JOIN `session_events` e ON e.`session_id` = d.`session_id`
  WHERE e.`kind` = 'harness' AND e.`type` = 'message' AND json_valid(e.`data`) AND e.`seq` BETWEEN 1 AND 4294967295
    AND (e.`data` ->> '$.content') IS NOT NULL;
--> statement-breakpoint
INSERT INTO `session_fts` (rowid, body, org) SELECT (`doc` << 32) | `seq`, `body`, `org` FROM `session_search_rows` ORDER BY `doc`, `seq`;
--> statement-breakpoint
CREATE TRIGGER `sessions_search_insert` AFTER INSERT ON `sessions` BEGIN
  -- The next key at or after this millisecond's first one: created_at order, then insertion order.
  INSERT INTO `session_search_docs` (`doc`, `key`, `session_id`, `org_id`) VALUES (
    coalesce((SELECT max(`doc`) FROM `session_search_docs`), 0) + 1,
    coalesce((SELECT max(`key`) + 1 FROM `session_search_docs` WHERE `key` >= new.`created_at` << 11), new.`created_at` << 11),
    new.`id`,
    new.`org_id`
  );
  INSERT INTO `session_fts` (rowid, body, org) VALUES (last_insert_rowid() << 32, new.`title` || char(10) || new.`prompt`, 'o' || lower(hex(new.`org_id`)));
END;
--> statement-breakpoint
CREATE TRIGGER `sessions_search_update` AFTER UPDATE OF `title`, `prompt` ON `sessions`
WHEN old.`title` IS NOT new.`title` OR old.`prompt` IS NOT new.`prompt` BEGIN
  DELETE FROM `session_fts` WHERE rowid = (SELECT `doc` << 32 FROM `session_search_docs` WHERE `session_id` = new.`id`);
  INSERT INTO `session_fts` (rowid, body, org)
    SELECT `doc` << 32, new.`title` || char(10) || new.`prompt`, 'o' || lower(hex(`org_id`)) FROM `session_search_docs` WHERE `session_id` = new.`id`;
END;
--> statement-breakpoint
-- Sessions do not move between orgs today; if one ever does, its rows are re-indexed under the new
-- org (the org token is part of every row), so it is found by the new org's searches only.
CREATE TRIGGER `sessions_search_org` AFTER UPDATE OF `org_id` ON `sessions` WHEN old.`org_id` IS NOT new.`org_id` BEGIN
  UPDATE `session_search_docs` SET `org_id` = new.`org_id` WHERE `session_id` = new.`id`;
  DELETE FROM `session_fts` WHERE rowid BETWEEN
    (SELECT `doc` << 32 FROM `session_search_docs` WHERE `session_id` = new.`id`) AND
    (SELECT (`doc` << 32) | 4294967295 FROM `session_search_docs` WHERE `session_id` = new.`id`);
  INSERT INTO `session_fts` (rowid, body, org)
    SELECT (`doc` << 32) | `seq`, `body`, `org` FROM `session_search_rows` WHERE `session_id` = new.`id` ORDER BY `seq`;
END;
--> statement-breakpoint
-- One message, one row: the same work for the first message of a session and its ten-thousandth.
CREATE TRIGGER `session_events_search_insert` AFTER INSERT ON `session_events`
WHEN new.`kind` = 'harness' AND new.`type` = 'message' AND json_valid(new.`data`) BEGIN
  UPDATE `session_search_docs` SET `message_count` = `message_count` + 1 WHERE `session_id` = new.`session_id`;
  INSERT INTO `session_fts` (rowid, body, org)
    SELECT (`doc` << 32) | new.`seq`, new.`data` ->> '$.content', 'o' || lower(hex(`org_id`)) FROM `session_search_docs`
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
  INSERT INTO `session_fts` (rowid, body, org)
    SELECT (`doc` << 32) | new.`seq`, new.`data` ->> '$.content', 'o' || lower(hex(`org_id`)) FROM `session_search_docs`
    WHERE `session_id` = new.`session_id` AND new.`kind` = 'harness' AND new.`type` = 'message' AND json_valid(new.`data`)
      AND new.`seq` BETWEEN 1 AND 4294967295 AND (new.`data` ->> '$.content') IS NOT NULL;
END;
