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

/** A GitHub App installation linked to the org (`GET /o/{org}/github`); `id` is what a run's `resources[].connection` names. */
export const GithubInstallation = t.Object({
  id: t.String({ description: 'The link’s id: a `connection` of a run’s resources' }),
  installation_id: t.Integer({ description: 'GitHub’s own id of the installation (also taken as a `connection`)' }),
  account: t.String({ description: 'The GitHub account the App is installed on' }),
  created_at: t.String({ format: 'date-time' }),
})
