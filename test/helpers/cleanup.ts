// The cleanup agentd/testing does after a server: one implementation for both.
export { removeDataDir, removeScope, sweepScope } from '../../clients/testing/data-dir'
