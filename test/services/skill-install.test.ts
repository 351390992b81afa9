import { afterAll, expect, test } from 'bun:test'
import { lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { HostPathError } from '../../sandbox/host-fs'
import { writeSkill } from '../../src/skills/service'

/** Skills go into the CLI's home, which the sandbox controls: a planted link reaches nothing outside it. */
const scratch = mkdtempSync(join(tmpdir(), 'agentd-skill-install-'))
afterAll(() => rmSync(scratch, { recursive: true, force: true }))
const files = { 'SKILL.md': Buffer.from('---\nname: s\ndescription: d\n---\n').toString('base64') }

test('a linked skills folder is refused and a linked SKILL.md replaced; the host file is untouched', () => {
  const outside = mkdtempSync(join(scratch, 'outside-'))
  writeFileSync(join(outside, 'SKILL.md'), 'host file')

  const linkedFolder = mkdtempSync(join(scratch, 'home-'))
  mkdirSync(join(linkedFolder, '.claude'))
  symlinkSync(outside, join(linkedFolder, '.claude/skills'))
  expect(() => writeSkill(linkedFolder, '.claude/skills', 's', files)).toThrow(HostPathError)

  const linkedFile = mkdtempSync(join(scratch, 'home-'))
  mkdirSync(join(linkedFile, '.claude/skills/s'), { recursive: true })
  symlinkSync(join(outside, 'SKILL.md'), join(linkedFile, '.claude/skills/s/SKILL.md'))
  writeSkill(linkedFile, '.claude/skills', 's', files)
  expect(lstatSync(join(linkedFile, '.claude/skills/s/SKILL.md')).isSymbolicLink()).toBe(false)
  expect(readFileSync(join(linkedFile, '.claude/skills/s/SKILL.md'), 'utf8')).toContain('name: s')

  expect(readdirSync(outside)).toEqual(['SKILL.md'])
  expect(readFileSync(join(outside, 'SKILL.md'), 'utf8')).toBe('host file')
})
