import { Elysia, t, type Static } from 'elysia'
import { nullable } from '../domain/schema-util'
import { DEFAULT_SETUP_TIMEOUT_S, MAX_SETUP_TIMEOUT_S, MAX_ALLOW_ENTRIES } from './environment'

const ALLOW_ENTRY =
  'A host name (`api.example.com`), `*.` and a domain (`*.example.com`: the names below it), or an IP address ' +
  '(IPv6 in brackets when a port follows), each optionally with `:port` (else 443 and 80); or `registries`: ' +
  'the public package registries of npm, PyPI, crates.io, the Go module proxy and Debian'

/** A Project's environment (contract section 10): setup script, its time limit, the hosts its sandboxes reach. */
export const ProjectEnvironment = t.Object({
  setup: nullable(
    t.String({ description: 'A bash script run once per sandbox (`bash -e` in /workspace) before the first turn; null: none' }),
  ),
  setup_timeout_s: t.Integer({ description: 'Seconds the setup may take', minimum: 1, maximum: MAX_SETUP_TIMEOUT_S }),
  network: t.Object({
    allow: t.Array(t.String({ description: ALLOW_ENTRY }), {
      description: 'What the sandboxes may reach through agentd’s egress proxy; empty: no network',
    }),
  }),
  revision: t.Integer({ description: '0 until the first PUT, then 1 more on each; keys the prebuilt images' }),
  updated_at: nullable(t.String({ format: 'date-time', description: 'When it was last set; null while it never was' })),
})

/** A Project secret as listed: its name only, never its value. */
export const ProjectSecret = t.Object({
  name: t.String(),
  updated_at: t.String({ format: 'date-time' }),
})

export const EnvironmentModel = {
  projectParams: t.Object({ org: t.String(), project: t.String({ description: 'The Project’s name (or id)' }) }),
  secretParams: t.Object({
    org: t.String(),
    project: t.String({ description: 'The Project’s name (or id)' }),
    name: t.String({ description: 'The secret’s name: `^[A-Z_][A-Z0-9_]{0,127}$`, not a variable agentd or a harness CLI relies on' }),
  }),
  putSecret: t.Object(
    { value: t.String({ description: 'The value, 1 byte to 64 KiB of UTF-8: sealed at rest, never shown again' }) },
    { additionalProperties: false },
  ),
  secretList: t.Object({ data: t.Array(ProjectSecret) }),
  putEnvironment: t.Object(
    {
      setup: t.Optional(nullable(t.String({ description: 'A bash script of at most 64 KiB; absent or null: none' }))),
      setup_timeout_s: t.Optional(
        t.Integer({ minimum: 1, maximum: MAX_SETUP_TIMEOUT_S, description: `Default ${DEFAULT_SETUP_TIMEOUT_S}` }),
      ),
      network: t.Optional(
        t.Object(
          { allow: t.Optional(t.Array(t.String({ maxLength: 300, description: ALLOW_ENTRY }), { maxItems: MAX_ALLOW_ENTRIES })) },
          { additionalProperties: false },
        ),
      ),
    },
    { additionalProperties: false },
  ),
} as const

export type EnvironmentModel = { [K in keyof typeof EnvironmentModel]: Static<(typeof EnvironmentModel)[K]> }

/** This feature's named models: each one component of the OpenAPI document, referenced by name from its routes. */
export const environmentModels = new Elysia({ name: 'agentd/models/environments' }).model({ ProjectEnvironment, ProjectSecret })
