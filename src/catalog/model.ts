import { type Static, Type } from '@sinclair/typebox'
import { HARNESSES } from '../domain/harness'
import { literals } from '../domain/schema-util'

const HarnessId = literals(HARNESSES)
const Name = Type.String({ minLength: 1 })

/** One model row of the discovery catalog (spec 2.11 `models[]`), built in or from the operator's config. */
export const CatalogModelSchema = Type.Object({
  id: Name,
  display_name: Name,
  provider: Name,
  type: Name,
  harnesses: Type.Array(HarnessId, { minItems: 1 }),
  pricing: Type.Object({ input_per_million: Type.Number({ minimum: 0 }), output_per_million: Type.Number({ minimum: 0 }) }),
  effort: Type.Array(Name),
  modes: Type.Array(Name),
  /** Harnesses on which `modes` such as `fast` are offered; all of `harnesses` when absent. */
  mode_harnesses: Type.Optional(Type.Array(HarnessId)),
})

export const CatalogHarnessSchema = Type.Object({
  id: HarnessId,
  display_name: Name,
  /** npm package of the CLI, and the version agentd ships with. */
  package: Name,
  default_model: Name,
  native_tools: Type.Array(Type.Object({ id: Name, label: Name })),
})

/** What the operator's config file may add under `catalog` (every key optional). */
export const CatalogConfigSchema = Type.Object({
  models: Type.Optional(Type.Array(CatalogModelSchema)),
  mcp_servers: Type.Optional(Type.Array(Type.Record(Type.String(), Type.Unknown()))),
  plugins: Type.Optional(Type.Object({ marketplaces: Type.Optional(Type.Array(Type.Object({ name: Name, source: Name }))) })),
})

export const BuiltinCatalogSchema = Type.Object({
  harnesses: Type.Array(CatalogHarnessSchema),
  models: Type.Array(CatalogModelSchema),
})

export type CatalogModel = Static<typeof CatalogModelSchema>
export type CatalogHarness = Static<typeof CatalogHarnessSchema>
