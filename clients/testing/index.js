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

/** How long a child agentd may take to say it is ready (a cold machine loading agentd's modules). */
const READY_TIMEOUT_MS = 60_000

/** Starts agentd in a Bun child process (child.ts) and waits for its ready line. */
function startChild(options, log) {
  const child = spawn(bunBinary(), [fileURLToPath(new URL('./child.ts', import.meta.url)), JSON.stringify(options)], {
    stdio: ['pipe', 'pipe', 'pipe'],
    env: { ...process.env, ...(log ? { AGENTD_TESTING_LOG: '1' } : {}) },
  })
  // Its own log lines, whole, to `log`; the last ones kept for an error that stops it starting.
  const said = []
  let partial = ''
  child.stderr.setEncoding('utf8')
  child.stderr.on('data', (chunk) => {
    const lines = (partial + chunk).split('\n')
    partial = lines.pop()
    for (const line of lines) {
      said.push(line)
      if (said.length > 20) said.shift()
      log?.(line)
    }
  })
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve(code ?? signal)))
  return new Promise((resolve, reject) => {
    const fail = (why) => {
      clearTimeout(timer)
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM')
      reject(new Error(`agentd/testing: ${why}${said.length ? `\n${said.join('\n')}` : ''}`))
    }
    const timer = setTimeout(() => fail(`agentd was not ready after ${READY_TIMEOUT_MS / 1000} s`), READY_TIMEOUT_MS)
    // Bun missing or not runnable: said as a failed start, not an unhandled error event.
    child.once('error', (err) => fail(`could not start Bun (${bunBinary()}): ${err.message}`))
    let out = ''
    const onData = (chunk) => {
      out += chunk
      const newline = out.indexOf('\n')
      if (newline < 0) return
      child.stdout.off('data', onData)
      clearTimeout(timer)
      let ready
      try {
        ready = JSON.parse(out.slice(0, newline))
      } catch {
        return fail(`agentd said something other than its ready line: ${out.slice(0, 200)}`)
      }
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
    exited.then((code) => fail(`agentd exited (${code}) before it was ready`))
  })
}
