/**
 * The programs a shell command line runs, for the tool-call index (`program`, `programs`).
 * Tokenizing is shell-quote's (quotes, escapes, operators); this file adds what it leaves to the
 * caller: newlines and heredocs, simple-command boundaries, redirections, assignments, keywords,
 * and wrappers such as `bash -lc '…'` or `env X=1 …`, whose inner command is what really runs.
 */
import { parse, type ParseEntry } from 'shell-quote'

/** Operators that end one simple command and start the next. */
const SEPARATORS = new Set(['|', '||', '&&', ';', ';;', '&', '|&', '(', ')', '<('])
/** Redirections: the word after them is a file, not an argument. */
const REDIRECTS = new Set(['<', '>', '>>', '>&', '<<', '<<<'])
/** Reserved words that may precede a command without being one. */
const KEYWORDS = new Set(['if', 'then', 'else', 'elif', 'fi', 'do', 'done', 'while', 'until', '!', '{', '}', 'time'])
/** Compound commands whose head is syntax (`for f in *`), not a command that runs. */
const COMPOUND_HEADS = new Set(['for', 'select', 'case', 'esac', 'function'])
const SHELLS = new Set(['sh', 'bash', 'zsh', 'dash', 'ksh'])
/** Wrappers that run the command after their options, and how many operands they take first. */
const WRAPPERS: Record<string, { operands: number; valued: string[] }> = {
  env: { operands: 0, valued: ['-u', '--unset', '-C', '--chdir'] },
  sudo: { operands: 0, valued: ['-u', '-g', '-h', '-p', '-C', '-U'] },
  nohup: { operands: 0, valued: [] },
  command: { operands: 0, valued: [] },
  exec: { operands: 0, valued: ['-a'] },
  nice: { operands: 0, valued: ['-n'] },
  timeout: { operands: 1, valued: ['-s', '--signal', '-k', '--kill-after'] },
}
const ASSIGNMENT = /^[A-Za-z_][A-Za-z0-9_]*=/
const MAX_DEPTH = 4

/** Every program the command runs, in order of appearance, without repeats. */
export function shellPrograms(command: string, depth = 0): string[] {
  const programs: string[] = []
  for (const words of simpleCommands(command)) {
    for (const program of programOf(words, depth)) if (!programs.includes(program)) programs.push(program)
  }
  return programs
}

/** Splits a command line into simple commands (their words, redirections removed). */
function simpleCommands(command: string): string[][] {
  // Keep `$VAR` as written instead of expanding it to nothing.
  const entries = parse(logicalLines(command), (key) => `$${key}`) as ParseEntry[]
  const commands: string[][] = [[]]
  let skipNext = false
  for (const entry of entries) {
    if (typeof entry === 'string' || ('op' in entry && entry.op === 'glob')) {
      if (skipNext) skipNext = false
      else commands.at(-1)!.push(typeof entry === 'string' ? entry : (entry as { pattern: string }).pattern)
      continue
    }
    if (!('op' in entry)) continue // a comment
    if (REDIRECTS.has(entry.op)) skipNext = true
    else if (SEPARATORS.has(entry.op)) commands.push([])
  }
  return commands.filter((words) => words.length > 0)
}

/** The program(s) one simple command runs: its first word, looking through shells and wrappers. */
function programOf(words: string[], depth: number): string[] {
  let i = 0
  while (i < words.length && (ASSIGNMENT.test(words[i]!) || KEYWORDS.has(words[i]!))) i++
  const first = words[i]
  if (first === undefined || COMPOUND_HEADS.has(first)) return []
  const name = first.split('/').at(-1)!
  if (SHELLS.has(name) && depth < MAX_DEPTH) {
    // `bash -lc 'script'`: the script's programs run, bash only hosts them.
    for (let j = i + 1; j < words.length; j++) {
      const word = words[j]!
      if (!word.startsWith('-')) break
      if (/^-[a-z]*c[a-z]*$/.test(word) && words[j + 1] !== undefined) return shellPrograms(words[j + 1]!, depth + 1)
    }
    return [name]
  }
  const wrapper = WRAPPERS[name]
  if (!wrapper) return [name]
  let j = i + 1
  while (j < words.length && (words[j]!.startsWith('-') || (name === 'env' && ASSIGNMENT.test(words[j]!)))) {
    j += wrapper.valued.includes(words[j]!) ? 2 : 1
  }
  j += wrapper.operands
  const inner = programOf(words.slice(j), depth)
  return inner.length > 0 ? inner : [name]
}

/**
 * Rewrites newlines outside quotes as `;` (shell-quote reads them as spaces) and drops comments
 * and heredoc bodies, which are text, not commands.
 */
function logicalLines(command: string): string {
  let out = ''
  let quote: "'" | '"' | null = null
  const heredocs: { word: string; strip: boolean }[] = []
  for (let i = 0; i < command.length; i++) {
    const c = command[i]!
    if (quote) {
      if (c === '\\' && quote === '"') {
        out += c + (command[++i] ?? '')
        continue
      }
      if (c === quote) quote = null
      out += c
      continue
    }
    if (c === '\\') {
      // A backslash-newline joins lines; any other escape is kept for shell-quote.
      if (command[i + 1] === '\n') i++
      else out += c + (command[++i] ?? '')
      continue
    }
    if (c === "'" || c === '"') {
      quote = c
      out += c
      continue
    }
    if (c === '#' && (i === 0 || /\s/.test(command[i - 1]!))) {
      while (i + 1 < command.length && command[i + 1] !== '\n') i++
      continue
    }
    if (c === '<' && command.startsWith('<<', i) && !command.startsWith('<<<', i)) {
      const match = /^<<(-?)\s*(['"]?)([A-Za-z0-9_]+)\2/.exec(command.slice(i))
      if (match) {
        heredocs.push({ word: match[3]!, strip: match[1] === '-' })
        i += match[0].length - 1
        continue
      }
    }
    if (c === '\n') {
      out += ' ; '
      // The bodies of heredocs opened on this line follow it, each up to its delimiter line.
      for (const doc of heredocs.splice(0)) {
        while (i < command.length) {
          const end = command.indexOf('\n', i + 1)
          const line = command.slice(i + 1, end < 0 ? command.length : end)
          i = end < 0 ? command.length : end
          if ((doc.strip ? line.replace(/^\t+/, '') : line) === doc.word) break
        }
      }
      continue
    }
    out += c
  }
  return out
}
