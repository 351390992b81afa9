// agentd inside a user's own test suite (contract section 13): `await startAgentd()` gives a real
// agentd, ready, with an org, an admin and an API key, and a typed client bound to it. Plain
// JavaScript (types in index.d.ts), so that Node runs it as it is: under Bun the server runs in
// the test's own process; under Node (node --test, Vitest) in a Bun child process it controls.
import { spawn } from 'node:child_process'
import { createRequire } from 'node:module'
import { fileURLToPath } from 'node:url'
import createClient from 'openapi-fetch'

/** @param {import('./index').StartAgentdOptions} [options] */
export async function startAgentd(options = {}) {
  const { log, ...serializable } = options
  const started = globalThis.Bun ? await (await import('./in-process.ts')).startInProcess(options) : await startChild(serializable, log)
  let stopped = null
  const stop = () => {
    stopped ??= started.stop()
    return stopped
  }
  return {
    url: started.url,
    token: started.token,
    org: started.org,
    apiKey: started.apiKey,
    apiKeyId: started.apiKeyId,
    client: createClient({ baseUrl: started.url, headers: { authorization: `Bearer ${started.token}` } }),
    stop,
    [Symbol.asyncDispose]: stop,
  }
}

/** The Bun that agentd depends on (npm's `bun` package), else one on PATH. */
function bunBinary() {
  try {
    return createRequire(import.meta.url).resolve('bun/bin/bun.exe')
  } catch {
    return 'bun'
  }
}

/** Starts agentd in a Bun child process (child.ts) and waits for its ready line. */
function startChild(options, log) {
  const child = spawn(bunBinary(), [fileURLToPath(new URL('./child.ts', import.meta.url)), JSON.stringify(options)], {
    stdio: ['pipe', 'pipe', log ? 'pipe' : 'ignore'],
    env: { ...process.env, ...(log ? { AGENTD_TESTING_LOG: '1' } : {}) },
  })
  if (log) child.stderr.on('data', (chunk) => String(chunk).split('\n').filter(Boolean).forEach(log))
  const exited = new Promise((resolve) => child.once('exit', (code) => resolve(code)))
  return new Promise((resolve, reject) => {
    let out = ''
    const onData = (chunk) => {
      out += chunk
      const newline = out.indexOf('\n')
      if (newline < 0) return
      child.stdout.off('data', onData)
      const ready = JSON.parse(out.slice(0, newline))
      resolve({
        ...ready,
        async stop() {
          if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM')
          await exited
        },
      })
    }
    child.stdout.setEncoding('utf8')
    child.stdout.on('data', onData)
    exited.then((code) => reject(new Error(`agentd/testing: agentd exited (${code}) before it was ready`)))
  })
}
