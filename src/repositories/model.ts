import { t } from 'elysia'

/** `GET …/changes` (spec 4.4). */
export const SessionChanges = t.Object({
  pr_url: t.Union([t.String(), t.Null()]),
  pr_number: t.Union([t.Integer(), t.Null()]),
  files: t.Array(
    t.Object({
      filename: t.String(),
      status: t.String({ description: 'The code host’s file status: added, modified, removed, renamed, …' }),
      additions: t.Integer(),
      deletions: t.Integer(),
      changes: t.Integer(),
      patch: t.Optional(t.String({ description: 'The unified diff, when the code host gives one' })),
    }),
  ),
  totals: t.Object({ files: t.Integer(), additions: t.Integer(), deletions: t.Integer(), changes: t.Integer() }),
  error: t.Optional(t.String()),
  error_code: t.Optional(t.Union([t.Literal('CHANGES_NO_INSTALLATION'), t.Literal('CHANGES_LIST_FAILED')])),
})
