import type { SessionStatus } from '../domain/status'
import type { ProjectRow } from '../identity/projects'
import type { Principal } from '../identity/service'
import type { RunSpec } from './create-rules'
import type { SessionInsert } from '../session-record/store'

export interface NewSession {
  id: string
  orgId: string
  project: ProjectRow | null
  principal: Principal
  accountId: string | null
  runSpec: RunSpec
  /** The repository its `resources` name, when its Project has none. */
  repository: { owner: string; name: string } | null
  /** The GitHub installation (its link id) the run reaches its repository through; null: none. */
  installation: string | null
  status: SessionStatus
  now: number
}

/** A new session's row: what its create asked for, on the Project's repository. */
export function newSessionRow({
  id,
  orgId,
  project,
  principal,
  accountId,
  runSpec,
  repository,
  installation,
  status,
  now,
}: NewSession): SessionInsert {
  return {
    id,
    orgId,
    projectId: project?.id ?? null,
    startedByUserId: principal.userId,
    apiKeyId: principal.apiKey?.id ?? null,
    accountId,
    agent: runSpec.agent,
    harness: runSpec.harness,
    harnessVersionRequested: runSpec.versionRequested,
    harnessVersionResolved: runSpec.versionResolved,
    status,
    mode: runSpec.mode,
    persistenceMode: runSpec.persistence,
    prompt: runSpec.prompt,
    title: runSpec.title,
    repoOwner: project?.repoOwner ?? repository?.owner ?? null,
    repoName: project?.repoName ?? repository?.name ?? null,
    baseBranch: runSpec.baseBranch,
    branch: runSpec.baseBranch,
    onPr: runSpec.onPr,
    githubInstallation: installation,
    model: runSpec.model,
    requestedModel: runSpec.requestedModel,
    effort: runSpec.effort,
    speed: runSpec.speed,
    outputSchema: runSpec.outputSchema,
    effectiveConfig: { harness_version: runSpec.versionResolved },
    createdAt: now,
    updatedAt: now,
  }
}
