import type { Catalog } from '../catalog/catalog'
import type { TokenUsage, TurnSpec } from '../harness/harness'
import type { SandboxHandle } from '../../sandbox/driver'
import type { SessionRow, SessionStore } from '../session-record/store'
import type { HarnessInstaller } from './harness-install'

export interface TurnSpecDeps {
  store: SessionStore
  catalog: Catalog
  installer: HarnessInstaller
  /** The names of a session's tool servers (shape B connections). */
  mcpServers: (sessionId: string) => string[]
}

/**
 * What the harness adapter is asked to run for one turn: the prompt, where the sandbox keeps the
 * workspace and home, the gateway and its key for this turn, the session's model settings, the
 * CLI's own session to resume, a pinned CLI version's install and the usage earlier turns reported.
 */
export async function turnSpec(
  deps: TurnSpecDeps,
  row: SessionRow,
  turn: number,
  prompt: string,
  handle: SandboxHandle,
  gatewayToken: string,
): Promise<TurnSpec> {
  const cliRoot = await pinnedCli(deps, row)
  const servers = deps.mcpServers(row.id)
  return {
    prompt,
    workspace: handle.workspace,
    home: handle.home,
    gatewayUrl: handle.gatewayUrl,
    gatewayToken,
    model: row.model,
    ...(row.effort ? { effort: row.effort } : {}),
    ...(row.speed ? { speed: row.speed } : {}),
    ...(row.outputSchema ? { outputSchema: row.outputSchema } : {}),
    ...(row.harnessSessionId ? { resumeId: row.harnessSessionId } : {}),
    ...(cliRoot ? { cliRoot } : {}),
    ...(turn > 1 || row.forkedConversation ? { priorUsage: priorUsage(deps.store, row, turn) } : {}),
    ...(servers.length > 0 ? { mcpServers: servers } : {}),
  }
}

/**
 * The first turn's prompt: a saved agent's instructions, then the caller's text, then the tracker
 * issues its resources named (marked as untrusted), then the lines naming the attachments (already
 * in the workspace), each part apart by a blank line.
 */
export function firstTurnPrompt(row: SessionRow, attachments: string | null): string {
  const instructions = row.snapshot?.instructions
  const parts = [
    typeof instructions === 'string' && instructions.trim() !== '' ? instructions : null,
    row.prompt,
    row.resourceText,
    attachments,
  ]
  return parts.filter((part) => part !== null).join('\n\n')
}

/** A pinned CLI version's install (made once, on first use); undefined for the bundled one. */
async function pinnedCli(deps: TurnSpecDeps, row: SessionRow): Promise<string | undefined> {
  const pkg = deps.catalog.harnesses.find((h) => h.id === row.harness)?.package
  if (!pkg || !row.harnessVersionRequested || !row.harnessVersionResolved) return undefined
  return deps.installer.modulesFor(pkg, row.harnessVersionResolved)
}

/**
 * What turns before `turn` reported in their `usage` events: Codex reports thread totals, not the
 * turn's. (A turn taken over after a restart has some of its own stored already.) A fork that went
 * on with its source's conversation: the source's turns up to the fork count too, and so on up a
 * fork of a fork.
 */
function priorUsage(store: SessionStore, session: SessionRow, turn: number): TokenUsage {
  const sum: TokenUsage = { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, reasoning: 0 }
  addUsage(sum, store, session.id, turn)
  for (
    let fork: SessionRow | null = session;
    fork?.forkedFromSession && fork.forkedConversation;
    fork = store.get(fork.forkedFromSession)
  ) {
    addUsage(sum, store, fork.forkedFromSession, (fork.forkedFromTurn ?? 0) + 1)
  }
  return sum
}

/** Adds what session `id`'s turns before `turn` reported to `sum`. */
function addUsage(sum: TokenUsage, store: SessionStore, id: string, turn: number): void {
  for (const row of store.allEvents(id)) {
    if (row.kind !== 'harness' || row.type !== 'usage' || row.turn >= turn) continue
    const n = (key: string) => (typeof row.data[key] === 'number' ? (row.data[key] as number) : 0)
    sum.input += n('inputTokens')
    sum.output += n('outputTokens')
    sum.cacheRead += n('cacheReadTokens')
    sum.cacheWrite += n('cacheCreationTokens')
  }
}
