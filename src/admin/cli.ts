import { existsSync } from 'node:fs'
import { parseArgs } from 'node:util'
import { ConfigError, loadConfig } from '../config'
import { openDb } from '../db/client'
import { loadCatalog } from '../catalog/catalog'
import { IdentityError, IdentityService } from '../identity/service'
import { loadDefaultPlan } from '../plans/config'
import type { PlanTerms } from '../plans/model'
import { PlanService } from '../plans/service'
import type { Role } from '../db/schema'
import { GithubApp } from '../repositories/github'
import { InstallationError, InstallationService, installationView } from '../repositories/installations'
import { backup, BackupError, restore } from './backup'

/**
 * `npm run admin -- <command>` (contract section 2). Works on the same DATA_DIR as a running
 * server: SQLite in WAL mode with a busy timeout lets both write.
 */
const USAGE = `usage:
  org create <slug>
  user create --org <slug> --email <email> --role admin|member
  user token --email <email>
  project create --org <slug> --name <handle> [--repo <owner/name or URL>] [--github <installation>]
  project unbind --org <slug> --name <handle>   (its runs then start without a repository)
  github link --org <slug> --installation <GitHub's installation id>
  github unlink --org <slug> --installation <id>
  github list --org <slug>
  plan set --org <slug> [--token-limit N] [--compute-minutes N] [--weekly-compute-minutes N]
           [--spend-cap-usd X] [--max-concurrent N] [--payment-method none|card]
           (a limit given as "none" is removed)
  plan clear --org <slug>
  backup <dir>      a consistent copy of the database and artifact blobs (while the server runs)
  restore <dir>     puts a backup into a DATA_DIR that has no database yet`

class UsageError extends Error {}

function required(values: Record<string, string | undefined>, name: string): string {
  const value = values[name]
  if (!value) throw new UsageError(`--${name} is required`)
  return value
}

function count(name: string, raw: string | undefined): number | null | undefined {
  if (raw === undefined) return undefined
  if (raw === 'none') return null
  const value = Number(raw)
  if (!Number.isInteger(value) || value < 0) throw new UsageError(`--${name} must be a whole number, got "${raw}"`)
  return value
}

export async function run(
  argv: string[],
  identity: IdentityService,
  plans: PlanService,
  installations: InstallationService,
): Promise<unknown> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    strict: true,
    options: {
      org: { type: 'string' },
      email: { type: 'string' },
      role: { type: 'string' },
      name: { type: 'string' },
      repo: { type: 'string' },
      github: { type: 'string' },
      installation: { type: 'string' },
      'token-limit': { type: 'string' },
      'compute-minutes': { type: 'string' },
      'weekly-compute-minutes': { type: 'string' },
      'spend-cap-usd': { type: 'string' },
      'max-concurrent': { type: 'string' },
      'payment-method': { type: 'string' },
    },
  })
  const [noun, verb, arg] = positionals
  switch (`${noun} ${verb}`) {
    case 'org create':
      if (!arg) throw new UsageError('org create needs a slug')
      return identity.createOrg(arg)
    case 'user create':
      return identity.createUser(required(values, 'org'), required(values, 'email'), required(values, 'role') as Role)
    case 'user token':
      return identity.tokenFor(required(values, 'email'))
    case 'project create': {
      // Bound to one of the org's installations, its runs go through that one alone: set as it is made.
      const org = identity.orgBySlug(required(values, 'org'))
      const link = values.github ? installations.find(org.id, values.github) : null
      if (values.github && !link) throw new UsageError(`--github: org "${org.slug}" has no installation ${values.github} (github list)`)
      const project = identity.createProject(org.slug, required(values, 'name'), values.repo ?? null, link?.id ?? null)
      return link ? { ...project, github_installation: link.id } : project
    }
    case 'project unbind':
      return identity.unbindProject(required(values, 'org'), required(values, 'name'))
    case 'github link': {
      const number = Number(required(values, 'installation'))
      if (!Number.isSafeInteger(number) || number < 1)
        throw new UsageError(`--installation must be GitHub's installation id (a number), got "${values.installation}"`)
      return installationView(await installations.link(identity.orgBySlug(required(values, 'org')).id, number))
    }
    case 'github unlink':
      return installationView(installations.unlink(identity.orgBySlug(required(values, 'org')).id, required(values, 'installation')))
    case 'github list':
      return installations.list(identity.orgBySlug(required(values, 'org')).id).map(installationView)
    case 'plan set': {
      const spend = values['spend-cap-usd']
      if (spend !== undefined && spend !== 'none' && !(Number(spend) >= 0))
        throw new UsageError(`--spend-cap-usd must be a number, got "${spend}"`)
      const payment = values['payment-method']
      if (payment !== undefined && payment !== 'none' && payment !== 'card') throw new UsageError('--payment-method must be none or card')
      const maxConcurrent = count('max-concurrent', values['max-concurrent'])
      if (maxConcurrent === 0) throw new UsageError('--max-concurrent must be at least 1')
      const plan: Partial<PlanTerms> = {
        tokenLimit: count('token-limit', values['token-limit']),
        computeMinutes: count('compute-minutes', values['compute-minutes']),
        weeklyComputeMinutes: count('weekly-compute-minutes', values['weekly-compute-minutes']),
        spendCapUsd: spend === undefined ? undefined : spend === 'none' ? null : Number(spend),
        maxConcurrent,
        paymentMethod: payment as PlanTerms['paymentMethod'] | undefined,
      }
      return plans.setPlan(required(values, 'org'), plan)
    }
    case 'plan clear':
      return plans.clearPlan(required(values, 'org'))
    default:
      throw new UsageError(`unknown command "${positionals.join(' ')}"`)
  }
}

if (import.meta.main) {
  // Backups and the database hold every org's data: for agentd's user only, as the server's files.
  process.umask(0o077)
  try {
    const config = loadConfig()
    const [command, target] = process.argv.slice(2)
    if ((command === 'backup' || command === 'restore') && !target) throw new UsageError(`${command} needs a folder`)
    if (command === 'restore') {
      console.log(JSON.stringify(restore(target!, config.dataDir, config.dbPath)))
      process.exit(0)
    }
    // A wrong DATA_DIR would be a new, empty database: backed up, it looks fine and holds nothing.
    if (command === 'backup' && !existsSync(config.dbPath)) throw new BackupError(`${config.dbPath} does not exist: is DATA_DIR right?`)
    const database = openDb(config.dbPath)
    try {
      if (command === 'backup') {
        console.log(JSON.stringify(backup(database.db.$client, config.dataDir, target!)))
        process.exit(0)
      }
      const plans = new PlanService({
        db: database.db,
        catalog: loadCatalog(config.configFile),
        defaultPlan: loadDefaultPlan(config.configFile),
        now: Date.now,
      })
      const github = config.githubApp ? new GithubApp(config.githubApiUrl, config.githubApp) : null
      console.log(
        JSON.stringify(
          await run(process.argv.slice(2), new IdentityService(database.db), plans, new InstallationService(database.db, github)),
        ),
      )
    } finally {
      database.close()
    }
  } catch (err) {
    const known =
      err instanceof UsageError ||
      err instanceof IdentityError ||
      err instanceof InstallationError ||
      err instanceof ConfigError ||
      err instanceof BackupError ||
      (err as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')
    console.error(`agentd admin: ${(err as Error).message}`)
    if (err instanceof UsageError) console.error(USAGE)
    process.exit(known ? 2 : 1)
  }
}
