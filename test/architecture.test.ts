import { expect, test } from 'bun:test'
import { Glob } from 'bun'
import { existsSync, readFileSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'

/**
 * The dependency rule (docs/architecture.md). Feature folders under src/ hold a feature's routes,
 * model and services; routes → feature services → {machines, db, sandbox, harness, gateway};
 * domain is imported by all and imports nothing of ours; machines and sandbox know nothing of the
 * layers around them; HTTP (elysia, src/http, route files) stays in the route layer; and no file
 * reaches itself again through its imports.
 */
const root = join(import.meta.dir, '..')

const FEATURES = [
  'accounts',
  'agents',
  'api-keys',
  'catalog',
  'connections',
  'environments',
  'files',
  'identity',
  'metrics',
  'plans',
  'projects',
  'region',
  'repositories',
  'runtime',
  'search',
  'sessions',
  'skills',
  'statechart',
  'transcript',
  'webhooks',
].map((f) => `src/${f}`)
const HTTP = ['src/http', 'src/app.ts']
const BELOW = ['machines', 'sandbox', 'src/db', 'src/gateway', 'src/harness']
/** The session record: row, patch, store, event log, masks and the actor's ports (docs/architecture.md). */
const GROUND_FLOOR = 'src/session-record'

const rules: { layer: string; forbidden: string[] }[] = [
  { layer: 'src/domain', forbidden: [...HTTP, ...FEATURES, ...BELOW] },
  { layer: 'machines', forbidden: [...HTTP, ...FEATURES, ...BELOW.filter((l) => l !== 'machines')] },
  { layer: 'sandbox', forbidden: [...HTTP, ...FEATURES, ...BELOW.filter((l) => l !== 'sandbox')] },
  { layer: 'src/db', forbidden: [...HTTP, ...FEATURES, 'machines', 'sandbox', 'src/gateway', 'src/harness'] },
  { layer: 'src/gateway', forbidden: [...HTTP, ...FEATURES, 'machines', 'sandbox', 'src/db'] },
  { layer: 'src/harness', forbidden: [...HTTP, ...FEATURES, 'machines', 'sandbox', 'src/db'] },
  { layer: 'src/http', forbidden: [...FEATURES, GROUND_FLOOR, 'src/db', 'machines', 'sandbox', 'src/gateway', 'src/harness'] },
  // The ground floor knows the domain, the database and the machines, and nothing built on it.
  { layer: GROUND_FLOOR, forbidden: [...HTTP, ...FEATURES, 'sandbox', 'src/gateway', 'src/harness', 'src/egress'] },
]

/** A route file: the HTTP face of a feature (`routes.ts`, `*-routes.ts`). */
const isRouteFile = (path: string) => /(^|\/|-)routes\.ts$/.test(path)
/**
 * A feature's model (`model.ts`): its TypeBox schemas, built with Elysia's `t` because the route
 * layer validates and coerces with them (Elysia's own module layout puts `t` there too). Services
 * may take types and schemas from a model.
 */
const isModelFile = (path: string) => /(^|\/)model\.ts$/.test(path)

/** Imports of `file`: package names as written, our files as repo-relative paths (with extension). */
function importsOf(file: string): { packages: string[]; files: string[] } {
  const text = readFileSync(file, 'utf8')
  const specs = [...text.matchAll(/(?:^|\n)\s*(?:import|export)[^'"]*?from\s+['"]([^'"]+)['"]/g)].map((m) => m[1]!)
  const files: string[] = []
  for (const spec of specs.filter((s) => s.startsWith('.'))) {
    const base = resolve(dirname(file), spec)
    const found = [base, `${base}.ts`, join(base, 'index.ts')].find((p) => existsSync(p) && p.endsWith('.ts'))
    files.push(relative(root, found ?? base))
  }
  return { packages: specs.filter((s) => !s.startsWith('.')), files }
}

const sources = () => ['src', 'machines', 'sandbox'].flatMap((dir) => [...new Glob(`${dir}/**/*.ts`).scanSync({ cwd: root })]).sort()

const inside = (path: string, layer: string) => path === layer || path.startsWith(`${layer}/`)

test('no layer imports a layer it must not know', () => {
  const violations: string[] = []
  for (const { layer, forbidden } of rules) {
    for (const path of sources().filter((p) => inside(p, layer))) {
      for (const target of importsOf(join(root, path)).files) {
        if (forbidden.some((f) => inside(target, f))) violations.push(`${path} imports ${target}`)
      }
    }
  }
  expect(violations).toEqual([])
})

test('HTTP stays in the route layer: elysia only in route files, models, src/http and the app; src/http and route files only imported there', () => {
  const violations: string[] = []
  for (const path of sources()) {
    if (isRouteFile(path) || HTTP.some((h) => inside(path, h)) || path === 'src/server.ts') continue
    const { packages, files } = importsOf(join(root, path))
    const elysia = packages.filter((pkg) => pkg === 'elysia' || pkg.startsWith('elysia/') || pkg.startsWith('@elysiajs/'))
    if (!isModelFile(path)) for (const pkg of elysia) violations.push(`${path} imports ${pkg}`)
    for (const target of files) if (isRouteFile(target) || HTTP.some((h) => inside(target, h))) violations.push(`${path} imports ${target}`)
  }
  expect(violations).toEqual([])
})

/** Every import cycle among `graph`'s files (each reported once, from its smallest file). */
function importCycles(graph: Map<string, string[]>): string[][] {
  const cycles: string[][] = []
  const seen = new Set<string>()
  const state = new Map<string, 'open' | 'done'>()
  const stack: string[] = []
  const visit = (file: string) => {
    state.set(file, 'open')
    stack.push(file)
    for (const next of graph.get(file) ?? []) {
      if (state.get(next) === 'open') {
        const cycle = stack.slice(stack.indexOf(next))
        const start = cycle.indexOf([...cycle].sort()[0]!)
        const key = [...cycle.slice(start), ...cycle.slice(0, start)]
        if (!seen.has(key.join(' → '))) {
          seen.add(key.join(' → '))
          cycles.push(key)
        }
      } else if (!state.has(next)) visit(next)
    }
    stack.pop()
    state.set(file, 'done')
  }
  for (const file of [...graph.keys()].sort()) if (!state.has(file)) visit(file)
  return cycles
}

test('no import cycle (type-only imports included: a cycle of types is a cycle of ideas)', () => {
  const graph = new Map(sources().map((path) => [path, importsOf(join(root, path)).files]))
  expect(importCycles(graph).map((cycle) => [...cycle, cycle[0]].join(' → '))).toEqual([])
})

test('the checks see real files and real cycles', () => {
  expect(importsOf(join(root, 'src/sessions/service.ts')).files).toContain('machines/session.machine.ts')
  expect(importsOf(join(root, 'src/sessions/routes.ts')).packages).toContain('elysia')
  const graph = new Map([
    ['a.ts', ['b.ts']],
    ['b.ts', ['c.ts']],
    ['c.ts', ['a.ts', 'd.ts']],
    ['d.ts', []],
  ])
  expect(importCycles(graph)).toEqual([['a.ts', 'b.ts', 'c.ts']])
  expect(
    importCycles(
      new Map([
        ['a.ts', ['d.ts']],
        ['d.ts', []],
      ]),
    ),
  ).toEqual([])
})

test('no source file over 400 lines: a longer one holds more than one idea', () => {
  const long = sources()
    .map((path) => ({ path, lines: readFileSync(join(root, path), 'utf8').split('\n').length - 1 }))
    .filter((file) => file.lines > 400)
    .map((file) => `${file.path}: ${file.lines} lines`)
  expect(long).toEqual([])
})

test('one place for each cross-cutting answer: org access in orgScope, sandbox abilities as capabilities', () => {
  const found: string[] = []
  for (const path of sources()) {
    const text = readFileSync(join(root, path), 'utf8')
    if (isRouteFile(path) && /auth\.access\(/.test(text)) found.push(`${path} resolves org access itself (use orgScope)`)
    if (inside(path, 'src') && /driver\.kind\s*[!=]==/.test(text)) found.push(`${path} branches on a driver's name (ask a capability)`)
  }
  expect(found).toEqual([])
})

test('every package the server and the clients import is a runtime dependency (the image installs with --omit=dev)', () => {
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { dependencies: Record<string, string> }
  const missing = new Set<string>()
  const files = ['src', 'machines', 'sandbox', 'clients'].flatMap((dir) => [...new Glob(`${dir}/**/*.ts`).scanSync({ cwd: root })])
  for (const path of files) {
    for (const spec of importsOf(join(root, path)).packages) {
      if (spec.startsWith('node:') || spec === 'bun' || spec.startsWith('bun:')) continue
      const name = spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : spec.split('/')[0]!
      if (!pkg.dependencies[name]) missing.add(`${name} (${path})`)
    }
  }
  expect([...missing]).toEqual([])
})

/**
 * The layers, lowest first: a file imports from its own layer or a lower one. The ground floor
 * (what everything shares: the domain, the database, the machines, then the session record); the
 * infrastructure the features use; the features, each on the ones before it; the composition on top.
 * docs/architecture.md draws them and says why each feature sits where it does.
 */
const LAYERS: string[][] = [
  ['src/domain', 'machines', 'src/db', 'src/config.ts', 'src/host-resources.ts'],
  [GROUND_FLOOR],
  ['sandbox', 'src/gateway', 'src/harness', 'src/egress', 'src/http'],
  ['src/region'],
  ['src/identity'],
  ['src/catalog'],
  ['src/metrics'],
  ['src/webhooks'],
  ['src/api-keys'],
  ['src/accounts'],
  ['src/plans'],
  ['src/files'],
  ['src/skills'],
  ['src/connections'],
  ['src/environments'],
  ['src/repositories'],
  ['src/runtime'],
  ['src/search'],
  ['src/sessions'],
  ['src/agents'],
  ['src/transcript'],
  ['src/projects'],
  ['src/statechart'],
  ['src/app.ts', 'src/server.ts', 'src/main.ts', 'src/housekeeping.ts', 'src/admin', 'src/console'],
]

/** Imports that run up the layers on purpose, `from -> to`, each with its reason in docs/architecture.md. None today. */
const UPWARD_ALLOWED: string[] = []

const layerOf = (path: string) => LAYERS.findIndex((layer) => layer.some((l) => inside(path, l)))

test('every source file sits in a layer', () => {
  expect(sources().filter((path) => layerOf(path) < 0)).toEqual([])
})

test('no import runs up the layers, except those docs/architecture.md lists with a reason', () => {
  const upward: string[] = []
  for (const path of sources()) {
    for (const target of importsOf(join(root, path)).files) {
      if (layerOf(path) < layerOf(target)) upward.push(`${path} -> ${target}`)
    }
  }
  expect(upward.filter((edge) => !UPWARD_ALLOWED.includes(edge))).toEqual([])
  const architecture = readFileSync(join(root, 'docs/architecture.md'), 'utf8')
  expect(UPWARD_ALLOWED.filter((edge) => !upward.includes(edge) || !architecture.includes(edge))).toEqual([])
})

/**
 * What a feature shows the others: its service, its model and its ports, and these files, each
 * named in docs/architecture.md's table of faces with why another feature may reach it.
 */
const FACES: Record<string, string[]> = {
  'src/catalog': ['catalog.ts', 'output-schema.ts'],
  'src/identity': ['auth.ts', 'projects.ts'],
  'src/accounts': ['seal.ts', 'owner.ts'],
  'src/metrics': ['metrics.ts'],
  'src/plans': ['meter.ts'],
  'src/repositories': ['installations.ts', 'run-access.ts'],
  'src/runtime': ['session-runtime.ts', 'artifacts.ts', 'harness-install.ts'],
  'src/sessions': ['create-rules.ts'],
  'src/connections': ['tracker.ts'],
}
const isFace = (feature: string, path: string) => {
  const name = path.slice(feature.length + 1)
  return ['service.ts', 'model.ts', 'ports.ts'].includes(name) || (FACES[feature] ?? []).includes(name)
}

test('a feature reaches another only through its face: its service, model, ports, or a file docs/architecture.md names', () => {
  const reached: string[] = []
  for (const path of sources()) {
    const from = FEATURES.find((f) => inside(path, f))
    if (!from) continue
    for (const target of importsOf(join(root, path)).files) {
      const to = FEATURES.find((f) => inside(target, f))
      if (to && to !== from && !isFace(to, target)) reached.push(`${path} -> ${target}`)
    }
  }
  expect(reached).toEqual([])
  const architecture = readFileSync(join(root, 'docs/architecture.md'), 'utf8')
  const unnamed = Object.entries(FACES).flatMap(([feature, files]) =>
    files.map((f) => `${feature}/${f}`).filter((f) => !architecture.includes(f)),
  )
  expect(unnamed).toEqual([])
})

test('no line over 140 characters in src/, sandbox/, machines/ (Biome formats to 140; a long message is split where it reads well)', () => {
  const long: string[] = []
  for (const path of sources()) {
    readFileSync(join(root, path), 'utf8')
      .split('\n')
      .forEach((line, i) => {
        if (line.length > 140) long.push(`${path}:${i + 1}`)
      })
  }
  expect(long).toEqual([])
})
