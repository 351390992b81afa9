import { createHash } from 'node:crypto'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Harness } from '../domain/harness'

/** One model row of the discovery catalog (spec 2.11 `models[]`). */
export interface CatalogModel {
  id: string
  display_name: string
  provider: string
  type: string
  harnesses: Harness[]
  pricing: { input_per_million: number; output_per_million: number }
  effort: string[]
  modes: string[]
  /** Harnesses on which `modes` such as `fast` are offered; all of `harnesses` when absent. */
  mode_harnesses?: Harness[]
}

export interface CatalogHarness {
  id: Harness
  display_name: string
  /** npm package of the CLI, and the version agentd ships with. */
  package: string
  default_model: string
  native_tools: { id: string; label: string }[]
}

export interface Catalog {
  harnesses: CatalogHarness[]
  models: CatalogModel[]
  mcp_servers: Record<string, unknown>[]
  plugins: { marketplaces: { name: string; source: string }[] }
}

const SCRIPTED: CatalogModel = {
  id: 'scripted',
  display_name: 'Scripted (local test model)',
  provider: 'local',
  type: 'scripted',
  harnesses: ['harness_1', 'harness_2', 'harness_3'],
  pricing: { input_per_million: 0, output_per_million: 0 },
  effort: ['low', 'medium', 'high'],
  modes: ['fast'],
  mode_harnesses: ['harness_1', 'harness_2'],
}

/** Real provider models with list prices; they run once the operator configures the provider. */
const PROVIDER_MODELS: CatalogModel[] = [
  {
    id: 'claude-opus-4-8',
    display_name: 'Claude Opus 4.8',
    provider: 'anthropic',
    type: 'chat',
    harnesses: ['harness_1'],
    pricing: { input_per_million: 5, output_per_million: 25 },
    effort: ['low', 'medium', 'high', 'xhigh', 'max'],
    modes: ['fast'],
  },
  {
    id: 'claude-sonnet-4-6',
    display_name: 'Claude Sonnet 4.6',
    provider: 'anthropic',
    type: 'chat',
    harnesses: ['harness_1'],
    pricing: { input_per_million: 3, output_per_million: 15 },
    effort: ['low', 'medium', 'high'],
    modes: [],
  },
  {
    id: 'gpt-5.5',
    display_name: 'GPT-5.5',
    provider: 'openai',
    type: 'chat',
    harnesses: ['harness_2'],
    pricing: { input_per_million: 1.25, output_per_million: 10 },
    effort: ['minimal', 'low', 'medium', 'high', 'xhigh'],
    modes: ['fast'],
  },
  {
    id: 'gemini-3.1-pro-preview',
    display_name: 'Gemini 3.1 Pro (preview)',
    provider: 'google',
    type: 'chat',
    harnesses: ['harness_3'],
    pricing: { input_per_million: 2, output_per_million: 12 },
    effort: ['low', 'high'],
    modes: [],
  },
]

const HARNESSES: CatalogHarness[] = [
  {
    id: 'harness_1',
    display_name: 'Claude Code',
    package: '@anthropic-ai/claude-code',
    default_model: 'scripted',
    native_tools: [
      { id: 'Bash', label: 'Shell' },
      { id: 'Read', label: 'Read files' },
      { id: 'Write', label: 'Write files' },
      { id: 'Edit', label: 'Edit files' },
    ],
  },
  {
    id: 'harness_2',
    display_name: 'Codex',
    package: '@openai/codex',
    default_model: 'scripted',
    native_tools: [{ id: 'exec_command', label: 'Shell' }],
  },
  {
    id: 'harness_3',
    display_name: 'Gemini CLI',
    package: '@google/gemini-cli',
    default_model: 'scripted',
    native_tools: [
      { id: 'run_shell_command', label: 'Shell' },
      { id: 'write_file', label: 'Write files' },
    ],
  },
]

export const DEFAULT_CATALOG: Catalog = {
  harnesses: HARNESSES,
  models: [SCRIPTED, ...PROVIDER_MODELS],
  mcp_servers: [],
  plugins: { marketplaces: [] },
}

/**
 * The operator's config file (`AGENTD_CONFIG`, JSON) may add models, tool-server connectors and
 * plugin marketplaces; rows with an existing id replace the built-in row.
 */
export function loadCatalog(configFile: string | null): Catalog {
  if (!configFile) return DEFAULT_CATALOG
  const parsed = JSON.parse(readFileSync(configFile, 'utf8')) as { catalog?: Partial<Catalog> }
  const extra = parsed.catalog ?? {}
  const models = new Map(DEFAULT_CATALOG.models.map((m) => [m.id, m]))
  for (const model of extra.models ?? []) models.set(model.id, model)
  return {
    harnesses: DEFAULT_CATALOG.harnesses,
    models: [...models.values()],
    mcp_servers: extra.mcp_servers ?? [],
    plugins: { marketplaces: extra.plugins?.marketplaces ?? [] },
  }
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

export function modelFor(catalog: Catalog, harness: Harness, modelId: string): CatalogModel | null {
  return catalog.models.find((m) => m.id === modelId && m.harnesses.includes(harness)) ?? null
}

export function offersMode(model: CatalogModel, harness: Harness, mode: string): boolean {
  return model.modes.includes(mode) && (model.mode_harnesses ?? model.harnesses).includes(harness)
}
