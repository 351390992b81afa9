/**
 * Sandboxes run below agentd in CPU priority: a busy agent (or a hostile one spinning every core
 * it may use) then only gets the CPU the API thread leaves, and requests are answered at once.
 * The niceness is inherited by everything the sandbox starts and cannot be lowered from inside
 * (that needs CAP_SYS_NICE, which no sandbox has).
 */
export const SANDBOX_NICE = 10

/** `argv` run at the sandboxes' niceness, through nice(1). */
export function niced(argv: string[]): string[] {
  return ['nice', '-n', String(SANDBOX_NICE), ...argv]
}
