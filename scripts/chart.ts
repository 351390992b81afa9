/**
 * `bun run chart`: writes docs/lifecycle.md and src/statechart/chart.svg from the session machine's
 * definition. The SVG is drawn once here, by Mermaid in headless Chromium (both dev dependencies),
 * so the server serves a finished drawing and needs neither at run time.
 */
import { join } from 'node:path'
import { chromium } from 'playwright-core'
import { lifecycleDoc, mermaidChart } from '../machines/chart'
import { chartSourceDigest } from '../src/statechart/chart-file'

const root = join(import.meta.dir, '..')
await Bun.write(join(root, 'docs', 'lifecycle.md'), lifecycleDoc())

const source = mermaidChart()
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu'],
})
try {
  const page = await browser.newPage()
  await page.setContent('<!doctype html><html><body></body></html>')
  await page.addScriptTag({ path: join(root, 'node_modules/mermaid/dist/mermaid.min.js') })
  const svg = await page.evaluate(async (text) => {
    const mermaid = (
      globalThis as unknown as { mermaid: { initialize(o: object): void; render(id: string, text: string): Promise<{ svg: string }> } }
    ).mermaid
    mermaid.initialize({ startOnLoad: false, securityLevel: 'strict' })
    return (await mermaid.render('lifecycle', text)).svg
  }, source)
  const header = `<!-- Drawn by \`bun run chart\` from machines/session.machine.ts; source sha256 ${chartSourceDigest(source)}. Do not edit. -->\n`
  await Bun.write(join(root, 'src/statechart/chart.svg'), `${header}${svg}\n`)
} finally {
  await browser.close()
}
console.log('wrote docs/lifecycle.md and src/statechart/chart.svg')
