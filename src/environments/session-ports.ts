import type { Socket } from 'node:net'
import { AllowList } from '../egress/allowlist'
import type { EgressProxy } from '../egress/proxy'
import type { SessionRow } from '../session-record/store'
import type { EnvironmentService } from './environment'
import type { PrebuildService } from './prebuilds'
import type { SecretService } from './secrets'

export interface SessionPortsDeps {
  environments: EnvironmentService
  secrets: SecretService
  prebuilds: PrebuildService
  /** The commit a run's checkout will get (`<branch>@<sha>`), null without a repository: the repositories feature's port. */
  headCommit: ((row: SessionRow) => Promise<string | null>) | null
  egress: EgressProxy
  /** A line for a session's stored log. */
  sessionLog: (sessionId: string, line: string) => void
}

/**
 * What the session runtime gets of a Project's environment (contract section 10): the variables,
 * setup and network of a session's sandbox, its prebuilt images, and its egress proxy. A session
 * of `_` has no Project, and none of these.
 */
export function sessionPorts(deps: SessionPortsDeps) {
  const { environments, secrets, prebuilds } = deps
  return {
    /** Read afresh before each turn: a changed secret or allow list applies from the next turn on. */
    environment: async (row: SessionRow) => {
      if (!row.projectId) return null
      const env = environments.get(row.projectId)
      const { values, digest } = await secrets.snapshot(row.projectId)
      return {
        secrets: values,
        setup: env.setup,
        setupTimeoutMs: env.setup_timeout_s * 1000,
        network: env.network.allow.length > 0,
        revision: env.revision,
        secretsDigest: digest,
      }
    },
    prebuilds: {
      async find(row: SessionRow) {
        if (!row.projectId) return null
        const env = environments.get(row.projectId)
        if (!env.setup) return null
        const commit = (await deps.headCommit?.(row)) ?? ''
        const key = { revision: env.revision, commit, secretsDigest: await secrets.digest(row.projectId) }
        return { commit, image: prebuilds.find(row.projectId, key) }
      },
      save: prebuilds.save.bind(prebuilds),
    },
    /**
     * The egress hook of a session's sandbox, when its Project allows any host as the sandbox is
     * made. The list is read again for each connection, so a narrowed list holds at once.
     */
    egress: (sessionId: string, projectId: string | null) => {
      if (!projectId || environments.get(projectId).network.allow.length === 0) return null
      return (inner: Socket, head: Buffer) =>
        deps.egress.handle(inner, head, {
          allow: AllowList.parse(environments.get(projectId).network.allow),
          log: (line) => deps.sessionLog(sessionId, `${new Date().toISOString()} ${line}\n`),
        })
    },
  }
}
