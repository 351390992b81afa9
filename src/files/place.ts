import type { SandboxDriver, SandboxHandle } from '../../sandbox/driver'
import { ATTACHMENTS_DIR } from './service'

/**
 * Removes the attachments folder of a workspace, by `rm` inside the sandbox (the workspace is the
 * sandbox's: a link planted there is removed, never followed on the host). For a sandbox started
 * from a prebuilt image, which holds the attachments of the session it was saved from.
 */
export async function clearAttachments(driver: SandboxDriver, handle: SandboxHandle): Promise<void> {
  const proc = driver.exec(handle, ['/bin/rm', '-rf', '--', `${handle.workspace}/${ATTACHMENTS_DIR}`], { env: { PATH: '/usr/bin:/bin' } })
  const [code, err] = await Promise.all([proc.exited, new Response(proc.stderr).text(), new Response(proc.stdout).arrayBuffer()])
  if (code !== 0) throw new Error(`the earlier attachments could not be removed: ${err.trim()}`)
}
