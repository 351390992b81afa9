import { asc, eq } from 'drizzle-orm'
import type { Db } from '../db/client'
import { sessionSkills } from '../db/schema'
import { writeInTree } from '../../sandbox/host-fs'
import type { SkillFetcher, SkillRef } from './fetch'
import type { FetchBudget } from '../egress/fetch-budget'
import { type Skill, skillInvalid } from './package'
import { skillSource } from './source'

/** A skill as the run reports it (`effective_config.skills`): where it came from and its pin. */
export interface SkillPin {
  name: string
  url: string
  commit: string | null
}

/** A skill URL's form, checked before anything is fetched (a saved agent's skills): the create's error for entry `index` otherwise. */
export function assertSkillUrl(url: string, index: number): void {
  if (!skillSource(url)) {
    throw skillInvalid(index, `${JSON.stringify(url)} is not a skill URL (a code-host tree or SKILL.md URL, an https SKILL.md, or a .zip)`)
  }
}

/**
 * A session's skills: fetched and checked at create time (SkillFetcher), kept with the run, and
 * written into the CLI's home, where its harness loads skills, before the first turn.
 */
export class SkillService {
  constructor(
    private readonly db: Db,
    private readonly fetcher: SkillFetcher,
  ) {}

  /** Fetches a create's skills within its fetch budget (shared with its images). */
  fetch(refs: SkillRef[], budget: FetchBudget): Promise<Skill[]> {
    return this.fetcher.fetchAll(refs, budget)
  }

  static pins(skills: Skill[]): SkillPin[] {
    return skills.map(({ name, url, commit }) => ({ name, url, commit }))
  }

  /** Records a new session's skills; call inside the transaction that inserts the session. */
  attach(sessionId: string, skills: Skill[]): void {
    skills.forEach((skill, position) => {
      const files = Object.fromEntries([...skill.files].map(([path, bytes]) => [path, Buffer.from(bytes).toString('base64')]))
      this.db.insert(sessionSkills).values({ sessionId, position, name: skill.name, url: skill.url, commit: skill.commit, files }).run()
    })
  }

  /**
   * Writes a session's skills under `skillsDir` of the CLI's home (`hostHome` on the host), one
   * folder per skill, through host-fs: the home is the sandbox's, so a planted link is never followed.
   */
  install(sessionId: string, hostHome: string, skillsDir: string): void {
    const rows = this.db
      .select()
      .from(sessionSkills)
      .where(eq(sessionSkills.sessionId, sessionId))
      .orderBy(asc(sessionSkills.position))
      .all()
    for (const row of rows) writeSkill(hostHome, skillsDir, row.name, row.files)
  }
}

/** One skill's files (base64 by path) into `<hostHome>/<skillsDir>/<name>/`, through host-fs. */
export function writeSkill(hostHome: string, skillsDir: string, name: string, files: Record<string, string>): void {
  for (const [path, base64] of Object.entries(files)) writeInTree(hostHome, `${skillsDir}/${name}/${path}`, Buffer.from(base64, 'base64'))
}
