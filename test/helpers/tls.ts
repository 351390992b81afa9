import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

export interface TestCa {
  /** The CA's certificate file, for AGENTD_FETCH_CA_FILE. */
  caFile: string
  /** A server certificate the CA signed, for localhost and 127.0.0.1. */
  cert: string
  key: string
  remove(): void
}

/** A throwaway CA and a server certificate it signed (openssl, P-256, two days), in a temp folder. */
export function makeTestCa(): TestCa {
  const dir = mkdtempSync(join(tmpdir(), 'agentd-ca-'))
  const run = (...args: string[]) => {
    const done = Bun.spawnSync(['openssl', ...args], { cwd: dir, stderr: 'pipe' })
    if (done.exitCode !== 0) throw new Error(`openssl ${args[0]} failed: ${done.stderr.toString()}`)
  }
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes']
  run(
    'req',
    '-x509',
    ...ec,
    '-keyout',
    'ca.key',
    '-out',
    'ca.pem',
    '-days',
    '2',
    '-subj',
    '/CN=agentd test CA',
    '-addext',
    'basicConstraints=critical,CA:TRUE',
    '-addext',
    'keyUsage=critical,keyCertSign',
  )
  run('req', ...ec, '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=localhost')
  writeFileSync(join(dir, 'ext'), 'subjectAltName=DNS:localhost,IP:127.0.0.1\n')
  run(
    'x509',
    '-req',
    '-in',
    'server.csr',
    '-CA',
    'ca.pem',
    '-CAkey',
    'ca.key',
    '-CAcreateserial',
    '-out',
    'server.pem',
    '-days',
    '2',
    '-extfile',
    'ext',
  )
  return {
    caFile: join(dir, 'ca.pem'),
    cert: readFileSync(join(dir, 'server.pem'), 'utf8'),
    key: readFileSync(join(dir, 'server.key'), 'utf8'),
    remove: () => rmSync(dir, { recursive: true, force: true }),
  }
}
