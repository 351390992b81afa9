import { basename, join } from 'node:path'

/** The console's sources (a Preact single-page app), bundled by Bun's own bundler. */
const ENTRY = join(import.meta.dir, '../../console/main.tsx')
/** The page's head script (the list's first request, sent before the app's script arrives), inlined. */
const EARLY = join(import.meta.dir, '../../console/early.ts')

export interface ConsoleAssets {
  /** The one page every console path answers with. */
  html: string
  /** Bundled files by their hashed names (`/console/assets/<name>`). */
  files: Map<string, { body: Uint8Array; type: string }>
  /** The CSP source allowing the page's one inline script, by its hash (`'sha256-…'`). */
  inlineScript: string
}

/**
 * The console, built by the server itself with `Bun.build` the first time it is asked for (a few
 * hundred milliseconds, once per process): nothing to build or commit beforehand, nothing served
 * from elsewhere, and a server that never serves it never builds it. A failed build is said on
 * that request and tried again on the next.
 */
export class ConsoleBundle {
  private built: Promise<ConsoleAssets> | null = null

  assets(): Promise<ConsoleAssets> {
    this.built ??= build().catch((err) => {
      this.built = null
      throw err
    })
    return this.built
  }
}

async function build(): Promise<ConsoleAssets> {
  const result = await Bun.build({
    entrypoints: [ENTRY],
    target: 'browser',
    minify: true,
    naming: { entry: '[name]-[hash].[ext]', asset: '[name]-[hash].[ext]', chunk: '[name]-[hash].[ext]' },
    define: { 'process.env.NODE_ENV': '"production"' },
  })
  if (!result.success) throw new Error(`the console did not build: ${result.logs.map(String).join('; ')}`)
  const files = new Map<string, { body: Uint8Array; type: string }>()
  for (const output of result.outputs)
    files.set(basename(output.path), { body: new Uint8Array(await output.arrayBuffer()), type: output.type })
  const named = (ext: string) => [...files.keys()].filter((name) => name.endsWith(ext))
  const early = await inline(EARLY)
  const html = [
    '<!doctype html>',
    '<html lang="en">',
    '<head>',
    '<meta charset="utf-8">',
    '<meta name="viewport" content="width=device-width, initial-scale=1">',
    '<title>agentd console</title>',
    // Before the stylesheet: an inline script after one would wait for it.
    `<script>${early}</script>`,
    ...named('.css').map((name) => `<link rel="stylesheet" href="/console/assets/${name}">`),
    '</head>',
    '<body>',
    '<div id="app"></div>',
    ...named('.js').map((name) => `<script type="module" src="/console/assets/${name}"></script>`),
    '</body>',
    '</html>',
  ].join('\n')
  return { html, files, inlineScript: `'sha256-${new Bun.CryptoHasher('sha256').update(early).digest('base64')}'` }
}

/** A script built to run inline: one minified classic script, nothing imported at run time. */
async function inline(entry: string): Promise<string> {
  const result = await Bun.build({ entrypoints: [entry], target: 'browser', format: 'iife', minify: true })
  if (!result.success) throw new Error(`the console's head script did not build: ${result.logs.map(String).join('; ')}`)
  const text = await result.outputs[0]!.text()
  // Inlined in a <script> element: a '</script' inside would end it early.
  if (/<\/script/i.test(text)) throw new Error("the console's head script holds '</script'")
  return text.trim()
}
