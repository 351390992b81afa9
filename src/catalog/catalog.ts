import { createHash } from 'node:crypto'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { type Static, type TSchema } from '@sinclair/typebox'
import { Value } from '@sinclair/typebox/value'
import { ConfigError, readConfigFile } from '../config'
import type { Harness } from '../domain/harness'
import { BuiltinCatalogSchema, CatalogConfigSchema, type CatalogHarness, type CatalogModel } from './model'

/** Runnable harnesses and the CLI version each runs; a harness missing here cannot start. */
export type HarnessVersions = Partial<Record<Harness, string>>

export type { CatalogHarness, CatalogModel } from './model'

export interface Catalog {
  harnesses: CatalogHarness[]
  models: CatalogModel[]
  mcp_servers: Record<string, unknown>[]
  plugins: { marketplaces: { name: string; source: string }[] }
}

/**
 * The built-in harnesses and models (`builtin.json`): the scripted test model, and real provider
 * models at list prices, which run once the operator configures their provider.
 */
export const DEFAULT_CATALOG: Catalog = {
  ...checked(BuiltinCatalogSchema, JSON.parse(readFileSync(join(import.meta.dir, 'builtin.json'), 'utf8')), 'src/catalog/builtin.json'),
  mcp_servers: [],
  plugins: { marketplaces: [] },
}

/**
 * The operator's config file (`AGENTD_CONFIG`, JSON) may add models, tool-server connectors and
 * plugin marketplaces; rows with an existing id replace the built-in row.
 */
export function loadCatalog(configFile: string | null): Catalog {
  if (!configFile) return DEFAULT_CATALOG
  const extra = checked(CatalogConfigSchema, readConfigFile(configFile).catalog ?? {}, 'AGENTD_CONFIG catalog')
  const models = new Map(DEFAULT_CATALOG.models.map((m) => [m.id, m]))
  for (const model of extra.models ?? []) models.set(model.id, model)
  return {
    harnesses: DEFAULT_CATALOG.harnesses,
    models: [...models.values()],
    mcp_servers: extra.mcp_servers ?? [],
    plugins: { marketplaces: extra.plugins?.marketplaces ?? [] },
  }
}

/** `value` as `schema` says, or a start-up error naming the first field that is wrong. */
function checked<T extends TSchema>(schema: T, value: unknown, where: string): Static<T> {
  const error = Value.Errors(schema, value).First()
  if (error) throw new ConfigError(`${where}${error.path.replaceAll('/', '.')}: ${error.message}`)
  return value as Static<T>
}

export function catalogRevision(catalog: Catalog): string {
  return createHash('sha256').update(JSON.stringify(catalog)).digest('hex').slice(0, 16)
}

const projectRoot = join(import.meta.dir, '..', '..')

/** The version of a harness CLI installed under node_modules, or null when it is not installed. */
export function installedVersion(pkg: string): string | null {
  const manifest = join(projectRoot, 'node_modules', pkg, 'package.json')
  if (!existsSync(manifest)) return null
  return (JSON.parse(readFileSync(manifest, 'utf8')) as { version: string }).version
}

/** The harnesses agentd can run here (an adapter and its CLI installed), with their installed versions. */
export function runnableVersions(catalog: Catalog, adapters: Partial<Record<Harness, unknown>>): HarnessVersions {
  const runnable: HarnessVersions = {}
  for (const harness of catalog.harnesses) {
    const version = installedVersion(harness.package)
    if (version && adapters[harness.id]) runnable[harness.id] = version
  }
  return runnable
}

/** Whether calls to `model` cost anything at its catalog price (the scripted model never does). */
export function isPriced(model: CatalogModel): boolean {
  return model.pricing.input_per_million > 0 || model.pricing.output_per_million > 0
}

export function modelFor(catalog: Catalog, harness: Harness, modelId: string): CatalogModel | null {
  return catalog.models.find((m) => m.id === modelId && m.harnesses.includes(harness)) ?? null
}

export function offersMode(model: CatalogModel, harness: Harness, mode: string): boolean {
  return model.modes.includes(mode) && (model.mode_harnesses ?? model.harnesses).includes(harness)
}
