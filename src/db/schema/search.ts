import { integer, sqliteTable, text } from 'drizzle-orm/sqlite-core'
import { sessions } from './sessions'

/**
 * One row per session, written by triggers (migrations `0003_search`, `0006_search_rows` and `0007_search_org`),
 * never by application code.
 *
 * `key` orders sessions: `created_at * 2048` plus the creation order among sessions created in the
 * same millisecond (at least the previous key + 1, so a clock stepping back or a 2049th session in
 * one millisecond still gets a fresh key, placed by creation order). So `key` order is
 * `created_at` order with ties broken by creation sequence, and every session created at or after
 * `since` has `key >= since * 2048`. Keys stay below 2^53 (exact in JavaScript) until the year
 * 2109. A new key is always larger than every existing one, so key order is also insertion order.
 *
 * `doc` numbers sessions in the same order (the largest existing `doc` + 1): it names the session
 * in the full-text index, where key itself (about 2^52) leaves no room for anything else.
 * `org_id` is the session's (kept in step by a trigger), so counting an org's full-text matches
 * reads only this narrow table. `message_count` counts the session's `message` events.
 *
 * The FTS5 table `session_fts` (contentless, rows deletable by rowid; queried with raw SQL in
 * `src/search/text.ts`, since drizzle-kit would try to create a declared one as a
 * plain table) holds one row per searchable piece of text, `rowid = doc * 2^32 + seq`: seq 0 is the
 * title and prompt, seq n the content of the session's `message` event with that seq (event seqs
 * start at 1; one at or past 2^32, four billion events into a session, is not indexed). The view
 * `session_search_rows` is the one definition of those rows (the migration's backfill reads it;
 * the tests check the index against it); triggers on `sessions` and `session_events` write the same rows one at
 * a time inside the writing transaction, one row per message event, so a message costs the same
 * however long the transcript already is. A session's rows are the rowid range
 * [doc * 2^32, (doc + 1) * 2^32) and rowid order is creation order, so matches stream newest first
 * and "does session d hold this phrase" is a rowid-bounded MATCH. Each row's second column, `org`,
 * holds one token naming the session's org ('o' and the org id's UTF-8 bytes in hex, migration
 * `0007_search_org`), so a search bounds the org inside the FTS5 query (`org : <token> AND body :
 * <phrase>`, see `inOrg`) rather than filtering what the index returned. The same migrations add indexes
 * on `sessions` for filters and counts, the title selector and the `cost` / `duration` sorts. A
 * migration that rebuilds `sessions` or `session_events` drops those triggers and indexes and must
 * recreate them (test/services/session-search.test.ts checks the objects).
 */
export const sessionSearchDocs = sqliteTable('session_search_docs', {
  doc: integer('doc').primaryKey(),
  key: integer('key').notNull().unique(),
  sessionId: text('session_id')
    .notNull()
    .unique()
    .references(() => sessions.id, { onDelete: 'cascade' }),
  orgId: text('org_id').notNull(),
  messageCount: integer('message_count').notNull().default(0),
})
