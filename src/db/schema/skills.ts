import { integer, primaryKey, sqliteTable, text } from 'drizzle-orm/sqlite-core'
import { ownedBy } from './columns'
import { sessions } from './sessions'

/**
 * The skills a session was created with (spec 4.1 `skills`), fetched once at create time and kept
 * with the run: `commit` is the pin of a code-host source, `files` the skill's files by path
 * (base64), installed into the CLI's home before the first turn.
 */
export const sessionSkills = sqliteTable(
  'session_skills',
  {
    sessionId: ownedBy('session_id', () => sessions.id),
    position: integer('position').notNull(),
    name: text('name').notNull(),
    url: text('url').notNull(),
    commit: text('commit'),
    files: text('files', { mode: 'json' }).$type<Record<string, string>>().notNull(),
  },
  (table) => [primaryKey({ columns: [table.sessionId, table.position] })],
)
