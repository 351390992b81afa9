/**
 * The lines of a session's log that tell of its Project's setup (contract section 10): the
 * script's own output (`setup: …`, the prebuilt image reused among them) and agentd's lines around
 * it (`agentd: setup started`, `agentd: setup done`, `agentd: setup failed: exit N`,
 * `agentd: setup timed out after N s`, `agentd: kept prebuilt image <id>`, or why none was kept).
 */
const SETUP_LINE = /^setup: |agentd: (setup |kept prebuilt image |prebuilt image not kept)/

export function setupLines(logs: string): string[] {
  return logs.split('\n').filter((line) => SETUP_LINE.test(line))
}
