import { sql } from 'drizzle-orm'
import { check, index, integer, primaryKey, real, sqliteTable, text, uniqueIndex } from 'drizzle-orm/sqlite-core'
import { SESSION_STATUSES } from '../../domain/status'
import { orgs, projects, users } from './identity'
import { createdAt, ownedBy } from './columns'

const statusList = SESSION_STATUSES.map((s) => `'${s}'`).join(', ')

/** One row per session: every CloudRunSession field, plus what the run needs to continue. */
export const sessions = sqliteTable(
  'sessions',
  {
    id: text('id').primaryKey(),
    orgId: ownedBy('org_id', () => orgs.id),
    projectId: text('project_id').references(() => projects.id, { onDelete: 'set null' }),
    startedByUserId: text('started_by_user_id').references(() => users.id, { onDelete: 'set null' }),
    apiKeyId: text('api_key_id'),
    kind: text('kind', { enum: ['cloud', 'local'] })
      .notNull()
      .default('cloud'),
    agent: text('agent').notNull(),
    harness: text('harness').notNull(),
    harnessVersionRequested: text('harness_version_requested'),
    harnessVersionResolved: text('harness_version_resolved'),
    // Derived from the machine snapshot by statusOf() in the same transaction; never set by hand.
    status: text('status', { enum: SESSION_STATUSES }).notNull(),
    mode: text('mode', { enum: ['headless', 'interactive'] }).notNull(),
    persistenceMode: text('persistence_mode', { enum: ['resumable', 'ephemeral'] }).notNull(),
    machineState: text('machine_state'),
    sandboxGeneration: integer('sandbox_generation').notNull().default(0),
    prompt: text('prompt').notNull(),
    /** Tracker issues the run's `resources` named, read at create, for the first turn's prompt. */
    resourceText: text('resource_text'),
    title: text('title').notNull(),
    repoOwner: text('repo_owner'),
    repoName: text('repo_name'),
    branch: text('branch'),
    baseBranch: text('base_branch'),
    onPr: integer('on_pr'),
    prUrl: text('pr_url'),
    /**
     * The github_installations row the run's git, push and pull request go through (not a foreign key:
     * unlinking one leaves its runs' `changes` saying so).
     */
    githubInstallation: text('github_installation'),
    summary: text('summary'),
    error: text('error'),
    model: text('model').notNull(),
    // What the caller asked for (spec `requested_overrides`), beside what runs.
    requestedModel: text('requested_model'),
    effort: text('effort'),
    speed: text('speed'),
    accountId: text('account_id'),
    outputSchema: text('output_schema', { mode: 'json' }).$type<Record<string, unknown>>(),
    inputTokens: integer('input_tokens'),
    outputTokens: integer('output_tokens'),
    cacheReadTokens: integer('cache_read_tokens'),
    cacheWriteTokens: integer('cache_write_tokens'),
    reasoningTokens: integer('reasoning_tokens'),
    totalTokens: integer('total_tokens'),
    totalCostUsd: real('total_cost_usd'),
    toolCallsCount: integer('tool_calls_count'),
    toolErrorsCount: integer('tool_errors_count'),
    turnsCount: integer('turns_count').notNull().default(0),
    filesProduced: integer('files_produced'),
    artifactCount: integer('artifact_count').notNull().default(0),
    sessionCapture: text('session_capture', { enum: ['complete', 'partial', 'failed'] }),
    effectiveConfig: text('effective_config', { mode: 'json' }).$type<Record<string, unknown>>(),
    // The CLI's own conversation id, so the next turn resumes it.
    harnessSessionId: text('harness_session_id'),
    /** The region node its sandbox lives on (contract section 12; AGENTD_NODE), recorded as it starts. */
    sandboxNode: text('sandbox_node'),
    /**
     * A fork (contract section 13): the session and turn whose parked sandbox it was copied from. No
     * foreign key: a fork outlives its source's row.
     */
    forkedFromSession: text('forked_from_session'),
    forkedFromTurn: integer('forked_from_turn'),
    /** The fork's CLI went on with its source's conversation (not on the process driver: SessionSandboxes.fork). */
    forkedConversation: integer('forked_conversation', { mode: 'boolean' }),
    resultText: text('result_text'),
    resultStructured: text('result_structured', { mode: 'json' }).$type<Record<string, unknown>>(),
    schemaValid: integer('schema_valid', { mode: 'boolean' }),
    hasResult: integer('has_result', { mode: 'boolean' }).notNull().default(false),
    completedAt: integer('completed_at'),
    /** Since when a turn has been running (status `running`), for the compute meter; null otherwise. */
    runningSince: integer('running_since'),
    // A run of a saved agent (spec 2.2): the revision it is pinned to, that revision's configuration,
    // what the caller asked over it and what it ran with. Null for every other run.
    profileId: text('profile_id'),
    profileRevision: integer('profile_revision'),
    profileDigest: text('profile_digest'),
    agentProfile: text('agent_profile', { mode: 'json' }).$type<{ id: string; name: string }>(),
    snapshot: text('snapshot', { mode: 'json' }).$type<Record<string, unknown>>(),
    requestedOverrides: text('requested_overrides', { mode: 'json' }).$type<Record<string, string>>(),
    effective: text('effective', { mode: 'json' }).$type<Record<string, string | null>>(),
    createdAt: createdAt(),
    updatedAt: integer('updated_at').notNull(),
  },
  (table) => [
    check('sessions_status_check', sql.raw(`status in (${statusList})`)),
    index('sessions_org_created_idx').on(table.orgId, table.createdAt),
    index('sessions_project_created_idx').on(table.projectId, table.createdAt),
    index('sessions_status_idx').on(table.status),
    index('sessions_forked_from_idx').on(table.forkedFromSession),
  ],
)

/** The session machine's persisted snapshot, written in the same transaction as the status column. */
export const sessionSnapshots = sqliteTable('session_snapshots', {
  sessionId: text('session_id')
    .primaryKey()
    .references(() => sessions.id, { onDelete: 'cascade' }),
  machineVersion: integer('machine_version').notNull(),
  snapshot: text('snapshot', { mode: 'json' }).notNull().$type<unknown>(),
  // Optimistic lock: every transition bumps it.
  version: integer('version').notNull(),
})

/** Everything that happened to a session, in order: status changes and normalized harness events. `seq` is the SSE id. */
export const sessionEvents = sqliteTable(
  'session_events',
  {
    sessionId: ownedBy('session_id', () => sessions.id),
    seq: integer('seq').notNull(),
    turn: integer('turn').notNull(),
    kind: text('kind', { enum: ['status', 'harness', 'log'] }).notNull(),
    type: text('type').notNull(),
    data: text('data', { mode: 'json' }).notNull().$type<Record<string, unknown>>(),
    createdAt: createdAt(),
  },
  (table) => [uniqueIndex('session_events_seq_idx').on(table.sessionId, table.seq)],
)

/** The harness's raw stdout, line by line as it wrote it, so the trajectory can be served verbatim. */
export const sessionTranscriptLines = sqliteTable(
  'session_transcript_lines',
  {
    sessionId: ownedBy('session_id', () => sessions.id),
    lineNo: integer('line_no').notNull(),
    turn: integer('turn').notNull(),
    line: text('line').notNull(),
  },
  (table) => [uniqueIndex('session_transcript_lines_idx').on(table.sessionId, table.lineNo)],
)

/**
 * Follow-up messages: queued behind a running turn, or delivered as the prompt of turn `turn`.
 * Durable, so a restart delivers what was queued.
 */
export const sessionMessages = sqliteTable(
  'session_messages',
  {
    id: text('id').primaryKey(),
    sessionId: ownedBy('session_id', () => sessions.id),
    seq: integer('seq').notNull(),
    content: text('content').notNull(),
    status: text('status', { enum: ['queued', 'delivered', 'dropped'] }).notNull(),
    turn: integer('turn'),
    createdAt: createdAt(),
    deliveredAt: integer('delivered_at'),
  },
  (table) => [
    uniqueIndex('session_messages_seq_idx').on(table.sessionId, table.seq),
    check('session_messages_status_check', sql`${table.status} in ('queued', 'delivered', 'dropped')`),
  ],
)

/**
 * Files a session produced under `/workspace/.agentd/artifacts/`, in first-seen (upload) order.
 * The bytes live content-addressed under DATA_DIR/blobs by their SHA-256.
 */
export const artifacts = sqliteTable(
  'artifacts',
  {
    sessionId: ownedBy('session_id', () => sessions.id),
    name: text('name').notNull(),
    ordinal: integer('ordinal').notNull(),
    size: integer('size').notNull(),
    contentType: text('content_type').notNull(),
    sha256: text('sha256').notNull(),
    turn: integer('turn').notNull(),
    createdAt: createdAt(),
    updatedAt: integer('updated_at').notNull(),
  },
  (table) => [
    primaryKey({ columns: [table.sessionId, table.name] }),
    uniqueIndex('artifacts_ordinal_idx').on(table.sessionId, table.ordinal),
    // Whether a blob is still named by an artifact (its garbage collection) asks by hash.
    index('artifacts_sha256_idx').on(table.sha256),
  ],
)

/**
 * `Idempotency-Key` of a create (contract section 8): one row per org, caller (`user:<id>` or
 * `key:<id>`) and key, naming the session it made and a digest of the body that made it. The
 * primary key is what makes concurrent identical creates make one session, whatever process
 * writes. Rows older than the retention count as absent and are swept.
 */
export const idempotencyKeys = sqliteTable(
  'idempotency_keys',
  {
    orgId: ownedBy('org_id', () => orgs.id),
    caller: text('caller').notNull(),
    key: text('key').notNull(),
    bodyDigest: text('body_digest').notNull(),
    sessionId: ownedBy('session_id', () => sessions.id),
    createdAt: createdAt(),
  },
  (table) => [primaryKey({ columns: [table.orgId, table.caller, table.key] }), index('idempotency_keys_created_idx').on(table.createdAt)],
)
