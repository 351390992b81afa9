import type { SandboxDriver, SandboxHandle } from '../../sandbox/driver'
import { writeInTree } from '../../sandbox/host-fs'
import { gitConfig } from './git-proxy'

/**
 * The repository checked out in the workspace, by git inside the sandbox (never on the host: a
 * workspace is the sandbox's to plant hooks and links in): branch `ref`, or its default branch, fetched through the
 * gateway with the turn's key. Resolves to the branch; throws with git's own words when it fails.
 */
export async function cloneInSandbox(driver: SandboxDriver, handle: SandboxHandle, repository: { owner: string; name: string }, base: string, ref: string | null = null): Promise<string> {
  const url = `${base}/${repository.owner}/${repository.name}.git`
  const script = [
    'set -e',
    'git init -q',
    'git remote add origin "$1"',
    "branch=${2:-$(git ls-remote --symref origin HEAD | sed -n 's|^ref: refs/heads/\\(.*\\)\\tHEAD$|\\1|p')}",
    'test -n "$branch" || { echo "the repository has no default branch" >&2; exit 1; }',
    'git fetch -q origin "$branch"',
    'git checkout -q -B "$branch" FETCH_HEAD',
    'git branch -q -u "origin/$branch"',
    // What agentd itself keeps in the workspace (artifacts) is never committed.
    "printf '.agentd/\\n' >> .git/info/exclude",
    'printf %s "$branch"',
  ].join('\n')
  const proc = driver.exec(handle, ['/bin/sh', '-c', script, 'clone', url, ref ?? ''], { env: { PATH: '/usr/bin:/bin', HOME: handle.home, GIT_TERMINAL_PROMPT: '0' } })
  const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited])
  if (code !== 0) throw new Error(`${repository.owner}/${repository.name} could not be cloned: ${err.trim().split('\n').slice(-3).join('; ') || `git exited ${code}`}`)
  return out.trim()
}

/**
 * The home's git config for one turn: the code host's URL goes to the gateway, with the turn's key
 * (a new one each turn). The home is the sandbox's: a link planted there is replaced, never followed.
 */
export function writeGitConfig(handle: SandboxHandle, token: string, base: string): void {
  writeInTree(handle.hostHome, '.gitconfig', gitConfig(handle.gatewayUrl, token, base))
}

/**
 * Commits what the turn changed (unless the CLI committed it already) and pushes it to `branch`,
 * by git inside the sandbox. Resolves to the branch the checkout tracks (the pull request's base),
 * or null when there was nothing new to push; throws with git's own words.
 */
export async function pushChanges(driver: SandboxDriver, handle: SandboxHandle, branch: string, message: string): Promise<string | null> {
  const script = [
    'set -e',
    "base=$(git rev-parse --abbrev-ref --symbolic-full-name '@{upstream}')",
    'git add -A',
    'git diff --cached --quiet || git commit -q -m "$1"',
    // Nothing new since the last push (or, before the first, since the checkout): no push, no
    // code host call. A push updates refs/remotes/origin/<branch>.
    'pushed="refs/remotes/origin/$2"',
    "git rev-parse -q --verify \"$pushed\" >/dev/null || pushed='@{upstream}'",
    'test "$(git rev-list --count "$pushed..HEAD")" != 0 || exit 0',
    'git push -q origin "HEAD:refs/heads/$2"',
    'printf %s "${base#origin/}"',
  ].join('\n')
  const proc = driver.exec(handle, ['/bin/sh', '-c', script, 'push', message, branch], { env: { PATH: '/usr/bin:/bin', HOME: handle.home, GIT_TERMINAL_PROMPT: '0' } })
  const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited])
  if (code !== 0) throw new Error(`the changes could not be pushed: ${err.trim().split('\n').slice(-3).join('; ') || `git exited ${code}`}`)
  return out.trim() || null
}
