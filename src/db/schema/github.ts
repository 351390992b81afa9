import { integer, sqliteTable, text, uniqueIndex } from 'drizzle-orm/sqlite-core'
import { createdAt, ownedBy } from './columns'
import { orgs } from './identity'

/**
 * A GitHub App installation an org's runs may reach repositories through (`GET /o/{org}/github`;
 * linked with `agentd admin github link`). `id` is the `connection` a run's `resources` may name;
 * `installation_id` is GitHub's own. An installation is linked to one org at most: another org
 * cannot reach its repositories by naming its number.
 */
export const githubInstallations = sqliteTable(
  'github_installations',
  {
    id: text('id').primaryKey(),
    orgId: ownedBy('org_id', () => orgs.id),
    installationId: integer('installation_id').notNull(),
    /** The GitHub account (user or organization) the App is installed on, as GitHub reported it when linked. */
    account: text('account').notNull(),
    createdAt: createdAt(),
  },
  (table) => [uniqueIndex('github_installations_installation_idx').on(table.installationId)],
)
