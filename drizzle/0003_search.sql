-- Org-wide session search (issue 7); the layout is described in src/db/schema/search.ts.
-- One contentless FTS5 row per session (rowid = session_search_docs.key) holding its title, prompt
-- and every `message` event's content. Triggers keep it in step inside the writing transaction.
CREATE VIRTUAL TABLE `session_fts` USING fts5(body, content='', tokenize='unicode61 remove_diacritics 2');
--> statement-breakpoint
-- The searchable text of a session, the one definition the backfill and the triggers use. The
-- triggers delete a document by handing FTS5 exactly this text, so changing the view means
-- re-indexing every session in the same migration ('delete-all', then insert from the view).
CREATE VIEW `session_search_text` AS
  SELECT d.`key`, d.`session_id`,
    s.`title` || char(10) || s.`prompt` || coalesce(char(10) || (
      SELECT group_concat(`content`, char(10)) FROM (
        SELECT e.`data` ->> '$.content' AS `content` FROM `session_events` e
        WHERE e.`session_id` = s.`id` AND e.`kind` = 'harness' AND e.`type` = 'message' AND json_valid(e.`data`)
        ORDER BY e.`seq`
      )
    ), '') AS `body`
  FROM `session_search_docs` d JOIN `sessions` s ON s.`id` = d.`session_id`;
--> statement-breakpoint
-- Keys for existing sessions, as the insert trigger would have given them: each is the larger of
-- created_at << 11 and the previous key + 1.
INSERT INTO `session_search_docs` (`key`, `session_id`)
  SELECT `n` + max((`created_at` << 11) - `n`) OVER (ORDER BY `n` ROWS UNBOUNDED PRECEDING), `id`
  FROM (SELECT row_number() OVER (ORDER BY `created_at`, rowid) AS `n`, `created_at`, `id` FROM `sessions`);
--> statement-breakpoint
UPDATE `session_search_docs` SET `message_count` = (
  SELECT count(*) FROM `session_events` e
  WHERE e.`session_id` = `session_search_docs`.`session_id` AND e.`kind` = 'harness' AND e.`type` = 'message' AND json_valid(e.`data`)
);
--> statement-breakpoint
INSERT INTO `session_fts` (rowid, body) SELECT `key`, `body` FROM `session_search_text`;
--> statement-breakpoint
CREATE TRIGGER `sessions_search_insert` AFTER INSERT ON `sessions` BEGIN
  -- The next key at or after this millisecond's first one: created_at order, then insertion order.
  INSERT INTO `session_search_docs` (`key`, `session_id`) VALUES (
    coalesce((SELECT max(`key`) + 1 FROM `session_search_docs` WHERE `key` >= new.`created_at` << 11), new.`created_at` << 11),
    new.`id`
  );
  INSERT INTO `session_fts` (rowid, body) VALUES (last_insert_rowid(), new.`title` || char(10) || new.`prompt`);
END;
--> statement-breakpoint
-- The table is contentless: a document is removed by handing FTS5 the text it indexed, which the
-- view still yields before the change (BEFORE triggers), and re-added after it (AFTER triggers).
CREATE TRIGGER `sessions_search_before_update` BEFORE UPDATE OF `title`, `prompt` ON `sessions`
WHEN old.`title` IS NOT new.`title` OR old.`prompt` IS NOT new.`prompt` BEGIN
  INSERT INTO `session_fts` (`session_fts`, rowid, body) SELECT 'delete', `key`, `body` FROM `session_search_text` WHERE `session_id` = old.`id`;
END;
--> statement-breakpoint
CREATE TRIGGER `sessions_search_after_update` AFTER UPDATE OF `title`, `prompt` ON `sessions`
WHEN old.`title` IS NOT new.`title` OR old.`prompt` IS NOT new.`prompt` BEGIN
  INSERT INTO `session_fts` (rowid, body) SELECT `key`, `body` FROM `session_search_text` WHERE `session_id` = new.`id`;
END;
--> statement-breakpoint
-- Runs before the cascade removes the session's events and its session_search_docs row.
CREATE TRIGGER `sessions_search_delete` BEFORE DELETE ON `sessions` BEGIN
  INSERT INTO `session_fts` (`session_fts`, rowid, body) SELECT 'delete', `key`, `body` FROM `session_search_text` WHERE `session_id` = old.`id`;
END;
--> statement-breakpoint
-- Before the row exists the view yields the indexed text; the new text is that plus the message
-- (messages arrive in seq order), so one read of the view serves the delete and the insert.
CREATE TRIGGER `session_events_search_insert` BEFORE INSERT ON `session_events`
WHEN new.`kind` = 'harness' AND new.`type` = 'message' AND json_valid(new.`data`) BEGIN
  UPDATE `session_search_docs` SET `message_count` = `message_count` + 1 WHERE `session_id` = new.`session_id`;
  INSERT INTO `session_fts` (`session_fts`, rowid, body)
    WITH `indexed` AS MATERIALIZED (SELECT `key`, `body` FROM `session_search_text` WHERE `session_id` = new.`session_id`)
    SELECT 'delete', `key`, `body` FROM `indexed`
    UNION ALL
    SELECT NULL, `key`, `body` || coalesce(char(10) || (new.`data` ->> '$.content'), '') FROM `indexed`;
END;
--> statement-breakpoint
-- Events go with their session (whose own trigger removed the document); these keep a lone delete exact.
CREATE TRIGGER `session_events_search_before_delete` BEFORE DELETE ON `session_events`
WHEN old.`kind` = 'harness' AND old.`type` = 'message' AND json_valid(old.`data`) BEGIN
  INSERT INTO `session_fts` (`session_fts`, rowid, body) SELECT 'delete', `key`, `body` FROM `session_search_text` WHERE `session_id` = old.`session_id`;
END;
--> statement-breakpoint
CREATE TRIGGER `session_events_search_after_delete` AFTER DELETE ON `session_events`
WHEN old.`kind` = 'harness' AND old.`type` = 'message' AND json_valid(old.`data`) BEGIN
  UPDATE `session_search_docs` SET `message_count` = `message_count` - 1 WHERE `session_id` = old.`session_id`;
  INSERT INTO `session_fts` (rowid, body) SELECT `key`, `body` FROM `session_search_text` WHERE `session_id` = old.`session_id`;
END;
--> statement-breakpoint
-- Filters and counts read this one index, newest first, without touching the (wide) rows.
CREATE INDEX `sessions_search_filter_idx` ON `sessions` (`org_id`, `created_at`, `status`, `harness`, `mode`, `model`, `project_id`, `agent`, `repo_owner`, `repo_name`);
--> statement-breakpoint
-- Selector resolution by title, and the `cost` and `duration` sorts, read these in order.
CREATE INDEX `sessions_search_title_idx` ON `sessions` (`org_id`, `title`);
--> statement-breakpoint
CREATE INDEX `sessions_search_cost_idx` ON `sessions` (`org_id`, coalesce(`total_cost_usd`, 0));
--> statement-breakpoint
CREATE INDEX `sessions_search_duration_idx` ON `sessions` (`org_id`, coalesce(`completed_at` - `created_at`, -1));
