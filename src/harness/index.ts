import type { Harness } from '../domain/harness'
import { claudeAdapter } from './claude'
import { codexAdapter } from './codex'
import { geminiAdapter } from './gemini'
import type { HarnessAdapter } from './harness'

/** Every harness this build can run, by id. */
export const ADAPTERS: Partial<Record<Harness, HarnessAdapter>> = {
  harness_1: claudeAdapter,
  harness_2: codexAdapter,
  harness_3: geminiAdapter,
}
