import type { ArtifactFile } from '../runtime/artifacts'
import type { AttachmentView } from '../files/service'
import type { SessionRow } from '../session-record/store'
import type { StartedBy } from '../domain/api-schemas'
import { iso } from '../domain/values'
import { answerOf, outputLine } from '../session-record/answer'

/** CloudRunSession (spec 2.2). */
export function cloudRunSession(
  row: SessionRow,
  startedBy: StartedBy | null,
  artifacts: ArtifactFile[] = [],
  queuePosition: number | null = null,
  attachments: AttachmentView[] = [],
) {
  return {
    execution_id: row.id,
    kind: row.kind,
    org_id: row.orgId,
    project_id: row.projectId,
    agent: row.agent,
    status: row.status,
    persistence_mode: row.persistenceMode,
    machine_state: row.machineState,
    queue_position: queuePosition,
    sandbox_generation: row.sandboxGeneration,
    prompt: row.prompt,
    repo_owner: row.repoOwner,
    repo_name: row.repoName,
    branch: row.branch,
    pr_url: row.prUrl,
    summary: row.summary,
    error: row.error,
    started_by: startedBy,
    input_tokens: row.inputTokens,
    output_tokens: row.outputTokens,
    cache_read_tokens: row.cacheReadTokens,
    cache_write_tokens: row.cacheWriteTokens,
    reasoning_tokens: row.reasoningTokens,
    total_tokens: row.totalTokens,
    total_cost_usd: row.totalCostUsd,
    model: row.model,
    tool_calls_count: row.toolCallsCount,
    tool_errors_count: row.toolErrorsCount,
    turns_count: row.turnsCount,
    files_produced: row.filesProduced,
    attachments,
    artifacts,
    artifact_count: row.artifactCount,
    harness_version_requested: row.harnessVersionRequested,
    harness_version_resolved: row.harnessVersionResolved,
    profile_id: row.profileId,
    profile_revision: row.profileRevision,
    profile_digest: row.profileDigest,
    // A saved agent's run records what was asked over the agent; any other run asked for all it set.
    requested_overrides: row.profileId
      ? (row.requestedOverrides ?? null)
      : row.requestedModel || row.effort || row.speed
        ? {
            ...(row.requestedModel ? { model: row.requestedModel } : {}),
            ...(row.effort ? { effort: row.effort } : {}),
            ...(row.speed ? { speed: row.speed } : {}),
          }
        : null,
    agent_profile: row.agentProfile ?? null,
    effective: row.effective ?? null,
    snapshot: row.snapshot ?? null,
    effective_config: row.effectiveConfig ?? null,
    session_capture: row.sessionCapture,
    ...(row.forkedFromSession !== null ? { forked_from: { session: row.forkedFromSession, turn: row.forkedFromTurn ?? 0 } } : {}),
    created_at: iso(row.createdAt)!,
    updated_at: iso(row.updatedAt),
  }
}

/** SessionResult (spec 2.7). */
export function sessionResult(row: SessionRow) {
  return {
    execution_id: row.id,
    status: row.status,
    branch: row.branch,
    pr_url: row.prUrl,
    output: outputLine(row),
    completed_at: iso(row.completedAt),
    result: answerOf(row),
  }
}
