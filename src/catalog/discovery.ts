import type { Harness } from '../domain/harness'
import { catalogRevision, offersMode, type Catalog } from './catalog'
import type { HarnessVersions } from './catalog'

/**
 * What a run can have (spec 2.11 `capabilities`): available, or why not, the same for every harness.
 * `network_allowlist` is a Project's `network.allow` (contract section 10); `instructions` a saved
 * agent's, put before its runs' first prompt.
 */
const CAPABILITIES = {
  browser: { available: false, disabled_reason: 'no browser is installed in the sandboxes' },
  computer: { available: false, disabled_reason: 'the sandboxes have no desktop: the CLIs run headless' },
  tools_selected: { available: false, disabled_reason: "a run cannot choose its CLI's tools: each runs with its own set" },
  network_allowlist: { available: true },
  instructions: { available: true },
  configuration: { available: false, disabled_reason: "a run cannot pass its CLI's own configuration files" },
} as const

/** AgentsAvailable (spec 2.11) for one org, optionally restricted to one harness. */
export function agentsAvailable(catalog: Catalog, runnable: HarnessVersions, checkedAt: Date, harness?: Harness) {
  const now = checkedAt.toISOString()
  const harnesses = catalog.harnesses
    .filter((h) => !harness || h.id === harness)
    .map((h) => {
      const version = runnable[h.id] ?? null
      const models = catalog.models.filter((m) => m.harnesses.includes(h.id))
      const defaultModel = models.find((m) => m.id === h.default_model) ?? models[0]
      return {
        id: h.id,
        display_name: h.display_name,
        runtime: {
          latest_verified: {
            id: version ?? 'unavailable',
            checked_at: now,
            pin_guarantee: true,
            image_digest: null,
            available: version !== null,
          },
          pinned: { available: version !== null },
        },
        models: models.map((m) => ({
          id: m.id,
          display_name: m.display_name,
          effort: m.effort,
          speed: [
            { id: 'standard', available: true },
            { id: 'fast', available: offersMode(m, h.id, 'fast') && h.id !== 'harness_3' },
          ],
        })),
        suggested_setups: defaultModel
          ? [
              {
                id: `${h.id}-default`,
                label: `${h.display_name} with ${defaultModel.display_name}`,
                defaults: {
                  model: { selection: 'fixed', id: defaultModel.id },
                  effort: defaultModel.effort.includes('medium') ? 'medium' : (defaultModel.effort[0] ?? null),
                  speed: 'standard',
                },
              },
            ]
          : [],
        native_tools: h.native_tools.map((tool) => ({ ...tool, available: version !== null })),
        plugins: [],
        capabilities: CAPABILITIES,
      }
    })
  const categories = new Map<string, number>()
  for (const server of catalog.mcp_servers) {
    const category = String(server.category ?? 'other')
    categories.set(category, (categories.get(category) ?? 0) + 1)
  }
  return {
    catalog_revision: catalogRevision(catalog),
    checked_at: now,
    harnesses,
    models: catalog.models.map(({ mode_harnesses: _, ...row }) => row),
    mcp_servers: catalog.mcp_servers,
    mcp_categories: [...categories].map(([name, count]) => ({ name, count })),
    plugins: {
      marketplaces: catalog.plugins.marketplaces,
      // No remote plugin catalog is hosted by a self-hosted server; the address is our own listing.
      catalog: { url: '', expires_at: Math.floor(checkedAt.getTime() / 1000) + 3600 },
    },
  }
}
