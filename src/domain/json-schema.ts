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
    super(`pattern ${JSON.stringify(pattern)} is not supported: ${reason} (patterns run on a linear-time engine, RE2: no backreferences or lookaround)`)
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

/** A fresh ajv with the linear-time engine. Fresh per schema: ajv caches every schema it compiled. */
export function schemaCompiler(options: Options = {}): Ajv {
  return new Ajv({ strict: false, ...options, code: { ...options.code, regExp: linearRegExp } })
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
        entry = schemaCompiler().compile(JSON.parse(json) as object)
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
