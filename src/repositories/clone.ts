import type { SandboxDriver, SandboxHandle } from '../../sandbox/driver'
import { writeInTree } from '../../sandbox/host-fs'
import { gitConfig } from './git-proxy'
import { gitEnvironment, runGit } from './sandbox-git'

/** git's own words when it failed: the last lines of its stderr, or its exit code. */
const gitWords = (stderr: string, code: number) => stderr.trim().split('\n').slice(-3).join('; ') || `git exited ${code}`

/**
 * The repository checked out in the workspace, by git inside the sandbox (never on the host: a
 * workspace is the sandbox's to plant hooks and links in): branch `ref`, or its default branch, fetched through the
 * gateway with the turn's key. Resolves to the branch; throws with git's own words when it fails.
 */
export async function cloneInSandbox(
  driver: SandboxDriver,
  handle: SandboxHandle,
  repository: { owner: string; name: string },
  base: string,
  ref: string | null = null,
): Promise<string> {
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
  const { code, stdout, stderr } = await runGit(driver, handle, ['/bin/sh', '-c', script, 'clone', url, ref ?? ''], gitEnvironment(handle))
  if (code !== 0) throw new Error(`${repository.owner}/${repository.name} could not be cloned: ${gitWords(stderr, code)}`)
  return stdout.trim()
}

/**
 * The home's git config for one turn: the code host's URL goes to the gateway, with the turn's key
 * (a new one each turn). The home is the sandbox's: a link planted there is replaced, never followed.
 */
export function writeGitConfig(handle: SandboxHandle, token: string, base: string): void {
  writeInTree(handle.hostHome, '.gitconfig', gitConfig(handle.gatewayUrl, token, base))
}

/** Where the publish puts the repository's own config while it runs (and puts it back from). */
const ASIDE = '.git/config.agentd-aside'

/**
 * The publish's script: `$1` the commit message, `$2` the branch, `$3` the repository's URL.
 * git reads no config the sandbox wrote: the repository's own `.git/config` is put aside for the
 * run (and back after it) and replaced by one naming only the remote; system and global config
 * and hooks are off in the environment (gitEnvironment). So no hook, fsmonitor, filter or diff
 * driver, signing program, credential helper or include of the sandbox's runs, whatever its
 * config, `.gitattributes` or hooks say. A `.git` that is not the checkout's own folder (a link,
 * a gitfile, a linked worktree whose config lives elsewhere) is refused.
 */
const PUBLISH = [
  'set -e',
  'test -d .git && test ! -L .git && test ! -e .git/commondir && test ! -L .git/commondir || { echo "the ' +
    'checkout\'s .git is not a repository folder of its own" >&2; exit 1; }',
  // A publish killed at its deadline left the repository's config aside: it goes back first.
  `if test -e ${ASIDE} || test -L ${ASIDE}; then rm -rf .git/config; mv ${ASIDE} .git/config; fi`,
  `if test -e .git/config || test -L .git/config; then mv .git/config ${ASIDE}; fi`,
  `trap 'rm -f .git/config; if test -e ${ASIDE} || test -L ${ASIDE}; then mv ${ASIDE} .git/config; fi' EXIT`,
  "printf '[core]\\n\\trepositoryformatversion = 0\\n\\tbare = false\\n\\tlogallrefupdates = true\\n[remote " +
    '"origin"]\\n\\turl = %s\\n\\tfetch = +refs/heads/*:refs/remotes/origin/*\\n\' "$3" > .git/config',
  // The branch the checkout tracks (the pull request's base), read from the config put aside as a
  // file (`--file` follows no include).
  'head=$(git symbolic-ref -q --short HEAD) || { echo "HEAD is not on a branch" >&2; exit 1; }',
  `merge=$(git config --file ${ASIDE} --get "branch.$head.merge" 2>/dev/null || true)`,
  'base=${merge#refs/heads/}',
  'test -n "$base" || { echo "branch $head tracks no branch of origin" >&2; exit 1; }',
  // The tracked branch comes from the sandbox's own config: a name git would not take is refused.
  'git check-ref-format --branch "$base" >/dev/null 2>&1 || { echo "branch $head tracks no valid branch name" >&2; exit 1; }',
  'git add -A',
  'git diff-index --quiet --cached HEAD -- || git commit -q --no-verify -m "$1"',
  // The run's files: what its branch changes since it left its base (its pull request's files);
  // none printed when git cannot tell (the field is then left as it was).
  'files=',
  'if names=$(git diff --name-only "refs/remotes/origin/$base...HEAD" --); then files=$(printf "%s" "$names" | grep -c "" || true); fi',
  // Nothing new since the last push (or, before the first, since the checkout): no push, no
  // code host call. A push updates refs/remotes/origin/<branch>.
  'pushed="refs/remotes/origin/$2"',
  'git rev-parse -q --verify "$pushed" >/dev/null || pushed="refs/remotes/origin/$base"',
  'test "$(git rev-list --count "$pushed..HEAD")" != 0 || { printf "%s\\n" "$files"; exit 0; }',
  'git push -q --no-verify origin "HEAD:refs/heads/$2"',
  'printf "%s\\n%s" "$files" "$base"',
].join('\n')

/**
 * Commits what the turn changed (unless the CLI committed it already) and pushes it to `branch`,
 * by git inside the sandbox, through the gateway with the turn's key `token`, killed when `signal`
 * (the turn's deadline) aborts. Resolves to the branch the checkout tracks (the pull request's
 * base), or null when there was nothing new to push, and the number of files the branch changes
 * since its base (null when git could not tell); throws with git's own words.
 */
export async function pushChanges(
  driver: SandboxDriver,
  handle: SandboxHandle,
  push: { url: string; remoteBase: string; token: string; branch: string; message: string; signal?: AbortSignal },
): Promise<{ base: string | null; files: number | null }> {
  const env = gitEnvironment(handle, { token: push.token, remoteBase: push.remoteBase })
  const { code, stdout, stderr } = await runGit(
    driver,
    handle,
    ['/bin/sh', '-c', PUBLISH, 'publish', push.message, push.branch, push.url],
    env,
    push.signal,
  )
  if (code !== 0) throw new Error(`the changes could not be pushed: ${gitWords(stderr, code)}`)
  // The count first (git's own, or nothing), then the base (a checked branch name), nothing else.
  const [files = '', base = '', ...rest] = stdout.split('\n')
  if (rest.length > 0) throw new Error('the publish printed more than it should have')
  return { base: base || null, files: /^\d{1,7}$/.test(files) ? Number(files) : null }
}
