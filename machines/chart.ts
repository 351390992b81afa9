import type { AnyMachineSnapshot, AnyStateMachine, AnyStateNode, AnyTransitionDefinition, EventObject } from 'xstate'
import { sessionMachine, type Refusal } from './session.machine'

/**
 * The lifecycle chart, read off the machine definition: its states, every transition (the machine
 * root's refusals repeated for each state they apply to), a Mermaid diagram and the tables of
 * docs/lifecycle.md. Nothing here is drawn by hand, so the chart cannot drift from the machine.
 */

export interface ChartState {
  id: string
  description: string | null
  final: boolean
  initial: boolean
  /** Actions run on entering the state, by name. */
  entry: string[]
}

export interface ChartTransition {
  /** Stable name of the row: `<from> <event> #<n>`, n counting the event's candidates in that state from 1. */
  key: string
  from: string
  event: string
  /** The guard's name; null when the candidate has none. */
  guard: string | null
  /** True when an earlier candidate for the same event and state has a guard: this one is the fallback. */
  fallback: boolean
  /** Defined on the machine root: it applies to every state that does not answer the event itself. */
  inherited: boolean
  /** The target state; null when the transition stays in `from` without re-entering it. */
  to: string | null
  reenter: boolean
  /**
   * Actions carried out (the runtime's effects, and the actor's writes in the transition's
   * transaction), entry actions of the target included.
   */
  effects: string[]
  /** Context bookkeeping (`assign` actions). */
  bookkeeping: string[]
  /** The answer when the machine refuses the event here. */
  refusal: Refusal | null
  /** The definition in the machine, to tell which row a transition took. */
  definition: AnyTransitionDefinition
}

type Action = AnyTransitionDefinition['actions'][number]

function stateNodes(machine: AnyStateMachine): AnyStateNode[] {
  return Object.values(machine.root.states)
}

export function chartStates(machine: AnyStateMachine = sessionMachine): ChartState[] {
  const initial = machine.root.initial?.target[0]?.key
  return stateNodes(machine).map((node) => ({
    id: node.key,
    description: node.description ?? null,
    final: node.type === 'final',
    initial: node.key === initial,
    entry: node.entry.map((a) => actionName(a)),
  }))
}

function guardName(guard: AnyTransitionDefinition['guard']): string | null {
  if (guard === undefined) return null
  if (typeof guard === 'string') return guard
  if (typeof guard === 'object' && guard !== null && 'type' in guard) return String(guard.type)
  return 'ƒ'
}

function actionName(action: Action): string {
  if (typeof action === 'string') return action
  if (typeof action === 'function') return (action as { type?: string }).type === 'xstate.assign' ? 'assign' : 'ƒ'
  const { type, params } = action as { type: string; params?: unknown }
  return params === undefined ? type : `${type}(…)`
}

function isBookkeeping(machine: AnyStateMachine, action: Action): boolean {
  if (typeof action === 'function') return (action as { type?: string }).type === 'xstate.assign'
  const name = typeof action === 'string' ? action : (action as { type: string }).type
  const impl = (machine.implementations.actions as Record<string, unknown>)[name] as { type?: string } | undefined
  return impl?.type === 'xstate.assign'
}

function refusalIn(actions: readonly Action[]): Refusal | null {
  for (const action of actions) {
    if (typeof action === 'object' && action !== null && (action as { type: string }).type === 'refuse') {
      return (action as { params: Refusal }).params
    }
  }
  return null
}

/** Every transition of every state, in definition order: the state's own, then the root's it falls back to. */
export function chartTransitions(machine: AnyStateMachine = sessionMachine): ChartTransition[] {
  const rows: ChartTransition[] = []
  const root = machine.root
  for (const node of stateNodes(machine)) {
    const events = [...node.transitions.keys()]
    for (const event of root.transitions.keys()) if (!events.includes(event)) events.push(event)
    for (const event of events) {
      const own = node.transitions.get(event) ?? []
      // The root's candidates are reached only when none of the state's own can be taken.
      const inherited = own.some((t) => t.guard === undefined) ? [] : (root.transitions.get(event) ?? [])
      let n = 0
      let guardedBefore = false
      for (const [definition, isInherited] of [...own.map((t) => [t, false] as const), ...inherited.map((t) => [t, true] as const)]) {
        n++
        const target = definition.target?.[0] ?? null
        const refusal = refusalIn(definition.actions)
        const entered = target && (target !== node || definition.reenter) ? target.entry : []
        const actions = definition.actions.filter(
          (a) => !(typeof a === 'object' && a !== null && (a as { type: string }).type === 'refuse'),
        )
        const guard = guardName(definition.guard)
        rows.push({
          key: `${node.key} ${event} #${n}`,
          from: node.key,
          event,
          guard,
          fallback: guard === null && guardedBefore,
          inherited: isInherited,
          to: target?.key ?? null,
          reenter: definition.reenter && target !== null,
          effects: [
            ...actions.filter((a) => !isBookkeeping(machine, a)).map((a) => actionName(a)),
            ...entered.filter((a) => !isBookkeeping(machine, a)).map((a) => `${actionName(a)} (entry)`),
          ],
          bookkeeping: [
            ...actions.filter((a) => isBookkeeping(machine, a)).map((a) => actionName(a)),
            ...entered.filter((a) => isBookkeeping(machine, a)).map((a) => `${actionName(a)} (entry)`),
          ],
          refusal,
          definition,
        })
        if (guard !== null) guardedBefore = true
      }
    }
  }
  return rows
}

/**
 * The row a snapshot takes for an event, or null when no transition is enabled (the machine
 * ignores the event there). Uses the machine's own selection, guards included.
 */
export function transitionTaken<TEvent extends EventObject>(
  snapshot: AnyMachineSnapshot,
  event: TEvent,
  machine: AnyStateMachine = sessionMachine,
  rows: ChartTransition[] = chartTransitions(machine),
): ChartTransition | null {
  const [definition] = machine.getTransitionData(snapshot as never, event as never)
  if (!definition) return null
  const from = String(snapshot.value)
  const row = rows.find((r) => r.from === from && r.definition === definition)
  if (!row) throw new Error(`no chart row for ${from} ${event.type}`)
  return row
}

function refusalText(refusal: Refusal): string {
  return `${refusal.kind}${refusal.code ? ` ${refusal.code}` : ''}`
}

function edgeLabel(row: ChartTransition): string {
  const guard = row.guard ? ` [${row.guard}]` : row.fallback ? ' [else]' : ''
  return `${row.event}${guard}`
}

export interface MermaidOptions {
  /** A state to highlight (the `current` class). */
  highlight?: string | null
}

/**
 * A Mermaid `stateDiagram-v2`: one node per state and one edge per pair of states a transition
 * connects (its label lists each event and guard). Transitions that stay in their state without
 * re-entering it (refusals, bookkeeping) are only in the table.
 */
export function mermaidChart(machine: AnyStateMachine = sessionMachine, options: MermaidOptions = {}): string {
  const states = chartStates(machine)
  const lines = ['stateDiagram-v2']
  for (const state of states) if (state.initial) lines.push(`  [*] --> ${state.id} : create`)
  const edges = new Map<string, string[]>()
  for (const row of chartTransitions(machine)) {
    if (row.to === null || row.refusal) continue
    const pair = `${row.from} --> ${row.to}`
    const labels = edges.get(pair) ?? []
    const label = edgeLabel(row)
    if (!labels.includes(label)) labels.push(label)
    edges.set(pair, labels)
  }
  for (const [pair, labels] of edges) lines.push(`  ${pair} : ${labels.join('<br/>')}`)
  for (const state of states) if (state.final) lines.push(`  ${state.id} --> [*]`)
  lines.push('  classDef final fill:#eceff1,stroke:#546e7a')
  const finals = states.filter((s) => s.final).map((s) => s.id)
  if (finals.length > 0) lines.push(`  class ${finals.join(',')} final`)
  if (options.highlight) {
    if (!states.some((s) => s.id === options.highlight)) throw new Error(`no state "${options.highlight}"`)
    lines.push('  classDef current fill:#ffe082,stroke:#e65100,stroke-width:3px')
    lines.push(`  class ${options.highlight} current`)
  }
  return lines.join('\n')
}

const cell = (text: string) => text.replace(/\|/g, '\\|').replace(/\n/g, ' ')
const code = (names: string[]) => (names.length === 0 ? '—' : names.map((n) => `\`${n}\``).join(', '))

/** The transition table (Markdown), one row per transition. */
export function transitionTable(machine: AnyStateMachine = sessionMachine): string {
  const lines = ['| # | From | Event | Guard | To | Side effects | Bookkeeping |', '| --- | --- | --- | --- | --- | --- | --- |']
  chartTransitions(machine).forEach((row, i) => {
    const event = `\`${row.event}\`${row.inherited ? ' ¹' : ''}`
    const guard = row.guard ? `\`${row.guard}\`` : row.fallback ? 'else' : '—'
    const to = row.refusal
      ? `refused: **${refusalText(row.refusal)}** “${cell(row.refusal.message)}”`
      : row.to === null
        ? '(stays)'
        : `${row.reenter ? '↻ ' : ''}\`${row.to}\``
    lines.push(`| ${i + 1} | \`${row.from}\` | ${event} | ${guard} | ${to} | ${code(row.effects)} | ${code(row.bookkeeping)} |`)
  })
  return lines.join('\n')
}

/** The states table (Markdown). */
export function stateTable(machine: AnyStateMachine = sessionMachine): string {
  const lines = ['| State | Kind | Entry | Description |', '| --- | --- | --- | --- |']
  for (const state of chartStates(machine)) {
    const kind = state.initial ? 'initial' : state.final ? 'final' : ''
    lines.push(`| \`${state.id}\` | ${kind} | ${code(state.entry)} | ${cell(state.description ?? '')} |`)
  }
  return lines.join('\n')
}

/** docs/lifecycle.md: diagram, legend, states and transitions, all generated. */
export function lifecycleDoc(machine: AnyStateMachine = sessionMachine): string {
  const rows = chartTransitions(machine)
  return `# Session lifecycle

<!-- Generated by \`bun run chart\` from machines/session.machine.ts. Do not edit: change the machine and regenerate. -->

The session machine (\`machines/session.machine.ts\`) holds every lifecycle rule. This page is read off
its definition: ${chartStates(machine).length} states, ${rows.length} transitions. \`GET /statechart\` shows the same diagram, and
with \`?session=<id>\` a session's current state and its history.

\`\`\`mermaid
${mermaidChart(machine)}
\`\`\`

## Legend

- **Diagram**: an edge joins two states when some transition leads from one to the other; its label
  lists each \`event [guard]\` (\`[else]\`: taken when the guards before it fail). Transitions that stay
  in their state (refusals, queueing, bookkeeping) are only in the table. Grey states are final.
- **Guard**: the named condition of \`setup({ guards })\`; candidates for one event are tried top to
  bottom and the first whose guard holds is taken. An event no candidate takes is ignored.
- **To**: the next state; \`↻\` re-enters it (its turn starts again); \`(stays)\` keeps the state; a
  **refused** row is the HTTP answer the service returns (status, code and sentence), nothing changes.
- **Side effects**: carried out by the service after the transition is committed (sandbox, turn,
  admission), or written in the same transaction (follow-up queue); \`(entry)\` runs on entering the
  target. **Bookkeeping**: \`assign\` actions updating the machine's context.
- ¹ Defined on the machine root: it answers the event in every state that does not answer it itself.

## States

${stateTable(machine)}

## Transitions

${transitionTable(machine)}
`
}
