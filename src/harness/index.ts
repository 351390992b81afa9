import type { Harness } from '../domain/harness'
import { claudeAdapter } from './claude'
import type { HarnessAdapter } from './harness'

/** Every harness this build can run, by id. */
export const ADAPTERS: Partial<Record<Harness, HarnessAdapter>> = {
  harness_1: claudeAdapter,
}
