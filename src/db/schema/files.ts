import { blob, index, integer, primaryKey, sqliteTable, text } from 'drizzle-orm/sqlite-core'
import { createdAt, ownedBy } from './columns'
import { orgs } from './identity'
import { sessions } from './sessions'

/**
 * A file a caller uploaded (`POST /o/{org}/files`) or sent inline in a shape B create (a document
 * or image block). The bytes live in the database so LiteFS replicates them with the session that
 * uses them. An upload no session uses is removed once `expires_at` passed (contract section 8).
 */
export const files = sqliteTable(
  'files',
  {
    id: text('id').primaryKey(),
    orgId: ownedBy('org_id', () => orgs.id),
    // Who may name it in a file block: `user:<id>` or `key:<id>`, as Idempotency-Key scopes.
    caller: text('caller').notNull(),
    name: text('name').notNull(),
    mime: text('mime').notNull(),
    size: integer('size').notNull(),
    data: blob('data', { mode: 'buffer' }).notNull(),
    createdAt: createdAt(),
    expiresAt: integer('expires_at').notNull(),
  },
  (table) => [index('files_expiry_idx').on(table.expiresAt)],
)

/**
 * A session's attachments in block order: `name` is the file's name in the sandbox's attachments
 * folder (made unique within the session), which may differ from the upload's own name.
 */
export const sessionAttachments = sqliteTable(
  'session_attachments',
  {
    sessionId: ownedBy('session_id', () => sessions.id),
    position: integer('position').notNull(),
    fileId: text('file_id')
      .notNull()
      .references(() => files.id),
    name: text('name').notNull(),
  },
  (table) => [primaryKey({ columns: [table.sessionId, table.position] }), index('session_attachments_file_idx').on(table.fileId)],
)
