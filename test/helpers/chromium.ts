import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { chromium, type BrowserContext } from 'playwright-core'

/** Debian's Chromium, which `scripts/system-deps.sh --test` installs. */
const CHROMIUM = '/usr/bin/chromium'

/**
 * Headless Chromium on a fresh profile (playwright takes it as the persistent context's user data
 * dir), with nothing of its own reaching the network; `close` removes the profile too.
 */
export async function launchChromium(viewport?: {
  width: number
  height: number
}): Promise<{ browser: BrowserContext; close(): Promise<void> }> {
  const profile = mkdtempSync(join(tmpdir(), 'agentd-chromium-'))
  const browser = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    ...(viewport ? { viewport } : {}),
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--no-first-run',
    ],
  })
  return {
    browser,
    async close() {
      await browser.close()
      rmSync(profile, { recursive: true, force: true })
    },
  }
}
