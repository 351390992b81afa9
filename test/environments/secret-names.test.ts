import { expect, test } from 'bun:test'
import { RESERVED_SECRET_NAMES, RESERVED_SECRET_PREFIXES, secretNameProblem } from '../../src/environments/secret-names'
import { ADAPTERS } from '../../src/harness'
import type { TurnSpec } from '../../src/harness/harness'

/** Secret names (contract section 10): never one agentd sets for a harness, whatever a turn asks for. */
const spec: TurnSpec = {
  prompt: 'p',
  workspace: '/workspace',
  home: '/home/agent',
  gatewayUrl: 'http://127.0.0.1:1',
  gatewayToken: 'token',
  model: 'scripted',
  effort: 'high',
  speed: 'fast',
  outputSchema: { type: 'object' },
  resumeId: 'resume',
  cliRoot: '/cache/node_modules',
  mcpServers: ['tickets'],
}

test('every variable a harness adapter sets for its CLI is refused as a secret name', () => {
  const set = Object.values(ADAPTERS).flatMap((adapter) => [
    ...Object.keys(adapter!.buildTurn(spec).env),
    ...Object.keys(adapter!.buildTurn({ ...spec, resumeId: undefined, mcpServers: [] }).env),
  ])
  expect(set.length).toBeGreaterThan(10)
  for (const name of new Set(set)) expect({ name, refused: secretNameProblem(name) !== null }).toEqual({ name, refused: true })
})

test('the reserved lists are well formed: upper case, and every exact name is itself refused', () => {
  for (const name of RESERVED_SECRET_NAMES) expect(secretNameProblem(name)).toContain('agentd sets itself')
  for (const prefix of RESERVED_SECRET_PREFIXES) {
    expect(prefix).toBe(prefix.toUpperCase())
    expect(secretNameProblem(`${prefix}X`)).toContain(`beginning with ${prefix}`)
  }
  expect(secretNameProblem('NPM_TOKEN')).toBeNull()
  expect(secretNameProblem('npm_token')).toContain('A-Z')
})
