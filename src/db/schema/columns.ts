import { integer, text, type AnySQLiteColumn } from 'drizzle-orm/sqlite-core'

/**
 * Columns many tables share, so each rule is written once: a row that belongs to another (a
 * session's events, an org's keys) is removed with it, and every row says when it was made.
 */
export const ownedBy = (name: string, owner: () => AnySQLiteColumn) => text(name).notNull().references(owner, { onDelete: 'cascade' })

/** Milliseconds since the epoch, like every timestamp agentd stores. */
export const createdAt = () => integer('created_at').notNull()
