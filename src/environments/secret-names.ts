/**
 * Which names a Project secret may have (contract section 10). A secret becomes an environment
 * variable of the setup script, each turn's CLI and everything they start, so it may not be one
 * that the shell, the dynamic linker, agentd's egress proxy or a harness CLI's own link to agentd
 * depends on.
 */

/** `^[A-Z_][A-Z0-9_]{0,127}$`: a portable environment variable name, upper case. */
export const SECRET_NAME = /^[A-Z_][A-Z0-9_]{0,127}$/

/**
 * Names no secret may take: the contract's (the shell's and the locale's own) and every variable
 * agentd sets for a harness CLI (src/harness/claude.ts, codex.ts, gemini.ts `buildTurn`;
 * test/environments/secret-names.test.ts checks each adapter's variables are refused).
 */
export const RESERVED_SECRET_NAMES: readonly string[] = [
  // the contract's
  'PATH',
  'HOME',
  'USER',
  'SHELL',
  'PWD',
  'TERM',
  'LANG',
  // set for every harness CLI
  'IS_SANDBOX',
  'DISABLE_AUTOUPDATER',
  'DISABLE_TELEMETRY',
  'DISABLE_ERROR_REPORTING',
  'ANTHROPIC_BASE_URL',
  'ANTHROPIC_API_KEY',
  'CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC',
  'CODEX_HOME',
  'GOOGLE_GEMINI_BASE_URL',
  'GEMINI_API_KEY',
  'GEMINI_CLI_NO_RELAUNCH',
  'NODE_COMPILE_CACHE',
]

/**
 * Beginnings no secret name may have, compared without case. The contract's: the locale (`LC_`),
 * the dynamic linker (`LD_`), agentd's own (`AGENTD_`, e.g. the Codex gateway key) and the proxy
 * variables the egress proxy sets. And the namespaces each harness CLI reads its model provider
 * from (Claude Code `ANTHROPIC_*`, `CLAUDE_*`; Codex `CODEX_*`, `OPENAI_*`; Gemini CLI `GEMINI_*`,
 * `GOOGLE_GEMINI_*`): a secret there could point the CLI past agentd's model gateway, so the
 * gateway stays its only route to a model.
 */
export const RESERVED_SECRET_PREFIXES: readonly string[] = [
  'LC_',
  'LD_',
  'AGENTD_',
  'HTTP_PROXY',
  'HTTPS_PROXY',
  'NO_PROXY',
  'ALL_PROXY',
  'ANTHROPIC_',
  'CLAUDE_',
  'CODEX_',
  'OPENAI_',
  'GEMINI_',
  'GOOGLE_GEMINI_',
]

/** Why `name` cannot name a secret, or null when it can. */
export function secretNameProblem(name: string): string | null {
  if (!SECRET_NAME.test(name)) return 'a secret name is 1 to 128 of A-Z, 0-9 and _, not starting with a digit'
  if (RESERVED_SECRET_NAMES.includes(name)) return `${name} is a variable agentd sets itself`
  const upper = name.toUpperCase()
  const prefix = RESERVED_SECRET_PREFIXES.find((p) => upper.startsWith(p))
  if (prefix) return `names beginning with ${prefix} are reserved for agentd`
  return null
}
