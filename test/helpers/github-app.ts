import { generateKeyPairSync } from 'node:crypto'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { startGitServer, type GitServer } from './git-server'
import { startGithubStandin, type GithubStandin } from './github-standin'

export interface GithubApp {
  git: GitServer
  github: GithubStandin
  /** What an agentd on this code host is configured with (the App, its key file, the URLs). */
  env: Record<string, string>
  /** The App's private key, PEM: it must appear nowhere a sandbox or a log can show. */
  privateKey: string
  stop(): void
}

/**
 * A code host for agentd's GitHub App: a key pair made now (PKCS#1, as GitHub hands App keys out),
 * the REST stand-in that checks the App's JWTs with its public half, and the git server that takes
 * only the stand-in's installation tokens, each for the repositories it was scoped to.
 */
export async function startGithubApp(appId = '4242'): Promise<GithubApp> {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', {
    modulusLength: 2048,
    privateKeyEncoding: { type: 'pkcs1', format: 'pem' },
    publicKeyEncoding: { type: 'spki', format: 'pem' },
  })
  const dir = mkdtempSync(join(tmpdir(), 'agentd-github-app-'))
  const keyFile = join(dir, 'app.pem')
  writeFileSync(keyFile, privateKey, { mode: 0o600 })
  let github: GithubStandin | null = null
  const git = startGitServer((token, owner, name) => github?.allows(token, owner, name) ?? false)
  github = await startGithubStandin(git, { appId, publicKey })
  return {
    git,
    github,
    env: {
      AGENTD_GITHUB_APP_ID: appId,
      AGENTD_GITHUB_APP_KEY_FILE: keyFile,
      AGENTD_GITHUB_GIT_URL: git.url,
      AGENTD_GITHUB_API_URL: github.url,
    },
    privateKey,
    stop() {
      github?.stop()
      git.stop()
      rmSync(dir, { recursive: true, force: true })
    },
  }
}
