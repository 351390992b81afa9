/**
 * The one way agentd compiles JSON Schemas it did not write (a caller's `output_schema`, a
 * sandbox's `text.format` schema): ajv with RE2 (re2js) as its regular-expression engine, so
 * `pattern` and `patternProperties` match in time linear in the input. ajv's default engine is
 * the JavaScript RegExp, which backtracks: `^(a+)+$` against forty a's and a `!` would hold the
 * server's only thread for hours.
 */
import Ajv, { type ErrorObject, type Options, type ValidateFunction } from 'ajv'
import { RE2JS } from 're2js'

/** A pattern RE2 cannot run (backreferences, lookaround) or cannot parse; the message names it. */
export class UnsupportedPattern extends Error {
  constructor(
    readonly pattern: string,
    reason: string,
  ) {
    super(
      `pattern ${JSON.stringify(pattern)} is not supported: ${reason} (patterns run on a linear-time engine, ` +
        'RE2: no backreferences or lookaround)',
    )
  }
}

/**
 * ajv's `code.regExp` engine. ajv calls it once per pattern at compile time and then only uses
 * `test`. `toString` is ajv's cache key for compiled patterns, so it must be the pattern itself.
 * The `u` flag ajv passes needs no mapping: RE2 always matches by code point.
 */
function linearRegExp(pattern: string, _flags: string): { test(input: string): boolean; toString(): string } {
  let re: RE2JS
  try {
    // translateRegExp maps ECMAScript-only spellings (`\u00e9`, `(?<name>…)`, `\/`) to RE2's.
    re = RE2JS.compile(RE2JS.translateRegExp(pattern))
  } catch (err) {
    throw new UnsupportedPattern(pattern, (err as Error).message)
  }
  return { test: (input) => re.test(input), toString: () => `re2:${pattern}` }
}
// Only read when ajv generates standalone code, which agentd never does.
linearRegExp.code = 'RE2JS.compile'

/**
 * A fresh ajv with the linear-time engine. Fresh per schema: ajv caches every schema it compiled.
 * Without ajv's code optimizer, whose passes grow with the square of the generated code: a schema
 * of 1,900 string properties (64 KiB) took 960 ms to compile with it and 86 ms without, 300 levels
 * of `items` 234 ms and 72 ms (docs/decisions.md). The validators check answers just as fast.
 */
export function schemaCompiler(options: Options = {}): Ajv {
  return new Ajv({ strict: false, ...options, code: { optimize: false, ...options.code, regExp: linearRegExp } })
}

/**
 * What a schema from outside may hold, beyond its 64 KiB, for compiling it to stay cheap on the
 * server's thread (measured in docs/decisions.md): JSON nesting; JSON objects, each subschema one
 * (compiling costs about 0.05 ms for each, so 64 KiB of small ones took up to half a second);
 * patterns (`pattern` values and `patternProperties` keys: each is an RE2 program of its own) and
 * their estimated RE2 size together (patternWeight); and `enum` values (OpenAI's limit for
 * structured outputs).
 */
export const SCHEMA_LIMITS = { depth: 64, objects: 1_000, patterns: 100, patternWeight: 10_000, enumValues: 1_000 } as const

/**
 * Why compiling `schema` could hold the server's thread, as a sentence, or null. Walked without
 * recursion, stopping at the first limit passed; counts may include a property merely named
 * `pattern` or `enum`, or an object that is a `const` value, which only errs on the safe side.
 */
export function schemaCostProblem(schema: unknown): string | null {
  const stack: [unknown, number][] = [[schema, 1]]
  let objects = 0
  let patterns = 0
  let weight = 0
  let enumValues = 0
  const pattern = (source: string): string | null => {
    patterns += 1
    weight += patternWeight(source)
    if (patterns > SCHEMA_LIMITS.patterns) return `holds more than ${SCHEMA_LIMITS.patterns} patterns`
    if (weight > SCHEMA_LIMITS.patternWeight)
      return (
        'has patterns too large to compile quickly (counted repetition expands to more than ' +
        `${SCHEMA_LIMITS.patternWeight} steps together)`
      )
    return null
  }
  while (stack.length > 0) {
    const [node, depth] = stack.pop()!
    if (typeof node !== 'object' || node === null) continue
    if (depth > SCHEMA_LIMITS.depth) return `is nested deeper than ${SCHEMA_LIMITS.depth} JSON levels`
    if (Array.isArray(node)) {
      for (const item of node) stack.push([item, depth + 1])
      continue
    }
    if (++objects > SCHEMA_LIMITS.objects) return `holds more than ${SCHEMA_LIMITS.objects} objects (subschemas)`
    for (const [key, value] of Object.entries(node)) {
      let problem: string | null = null
      if (key === 'pattern' && typeof value === 'string') problem = pattern(value)
      if (key === 'patternProperties' && typeof value === 'object' && value !== null)
        for (const source of Object.keys(value)) problem ??= pattern(source)
      if (key === 'enum' && Array.isArray(value) && (enumValues += value.length) > SCHEMA_LIMITS.enumValues)
        problem = `holds more than ${SCHEMA_LIMITS.enumValues} enum values`
      if (problem) return problem
      stack.push([value, depth + 1])
    }
  }
  return null
}

/**
 * About how many steps RE2 compiles `pattern` to: one per atom, and a counted repetition `{n,m}`
 * copies what it repeats m times (n + 1 when unbounded), nested ones multiplying. `.{0,1000}`
 * weighs 1,000 and took 18 ms to compile; ten of them 100 ms. An upper estimate is enough.
 */
export function patternWeight(pattern: string): number {
  const groups = [0]
  let last = 0
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i]
    if (c === '(') {
      groups.push(0)
      continue
    }
    if (c === ')') {
      last = (groups.length > 1 ? groups.pop()! : 0) + 1
      groups[groups.length - 1]! += last
      continue
    }
    const repeat = c === '{' ? /^\{(\d+)(,?)(\d*)\}/.exec(pattern.slice(i, i + 24)) : null
    if (repeat) {
      const times = repeat[3] ? Number(repeat[3]) : Number(repeat[1]) + (repeat[2] ? 1 : 0)
      groups[groups.length - 1]! += last * Math.max(times - 1, 0)
      last *= Math.max(times, 1)
      i += repeat[0].length - 1
      continue
    }
    if (c === '\\') i++
    else if (c === '[') {
      // A class is one step: skip to its end (a `]` first in it, or after `^`, is a member).
      let j = i + 1
      if (pattern[j] === '^') j++
      if (pattern[j] === ']') j++
      while (j < pattern.length && pattern[j] !== ']') j += pattern[j] === '\\' ? 2 : 1
      i = j
    }
    last = 1
    groups[groups.length - 1]! += 1
  }
  return groups.reduce((sum, w) => sum + w, 0)
}

/** A schema whose compiling could hold the server's thread (schemaCostProblem); not compiled. */
export class SchemaTooCostly extends Error {}

/** `schema` compiled, after schemaCostProblem: throws SchemaTooCostly instead of compiling a costly one. */
export function compileSchema(schema: object, options: Options = {}): ValidateFunction {
  const problem = schemaCostProblem(schema)
  if (problem) throw new SchemaTooCostly(`the schema ${problem}`)
  return schemaCompiler(options).compile(schema)
}

/**
 * Validators of recently seen schemas, keyed by their JSON text: compiling (code generation) costs
 * far more than checking, and a client sends the same schema with every request. A schema that
 * does not compile is remembered too, so its error is not paid for again.
 */
export class ValidatorCache {
  private readonly entries = new Map<string, ValidateFunction | Error>()

  constructor(private readonly capacity: number) {}

  /** The validator of the schema whose JSON text is `json`; throws why it does not compile. */
  get(json: string): ValidateFunction {
    let entry = this.entries.get(json)
    if (entry === undefined) {
      try {
        entry = compileSchema(JSON.parse(json) as object)
      } catch (err) {
        entry = err as Error
      }
      if (this.entries.size >= this.capacity) this.entries.delete(this.entries.keys().next().value as string)
    } else {
      // Most recently used last, so the oldest is the one dropped.
      this.entries.delete(json)
    }
    this.entries.set(json, entry)
    if (entry instanceof Error) throw entry
    return entry
  }
}

/** ajv's errors as one line, as `ajv.errorsText` words them (`data/s must match pattern "…"`). */
export function errorsText(errors: ErrorObject[] | null | undefined): string {
  return (errors ?? []).map((e) => `data${e.instancePath} ${e.message ?? 'is invalid'}`).join(', ')
}
