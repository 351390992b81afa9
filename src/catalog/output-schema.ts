import type { ValidateFunction } from 'ajv'
import { schemaCompiler, schemaCostProblem, UnsupportedPattern } from '../domain/json-schema'

const MAX_BYTES = 64 * 1024
const MAX_DEPTH = 10

/**
 * Checks the spec's `output_schema` rules (4.1): root type object; every object lists all its
 * properties in `required` and sets `additionalProperties: false`; `$ref` stays inside the
 * document; at most 10 levels deep and 64 KiB; and it must compile as a JSON Schema whose patterns
 * the linear-time engine accepts (domain/json-schema.ts), so answers are checked without backtracking.
 * Before it is compiled, its patterns and enum values are held to what compiles quickly
 * (schemaCostProblem), so no create holds the server's thread. Returns the first broken rule as a
 * sentence, or null when the schema is acceptable.
 */
export function outputSchemaProblem(schema: unknown): string | null {
  if (typeof schema !== 'object' || schema === null || Array.isArray(schema)) return 'output_schema must be a JSON object'
  if (new TextEncoder().encode(JSON.stringify(schema)).length > MAX_BYTES) return 'output_schema is larger than 64 KiB'
  const root = schema as Record<string, unknown>
  if (root.type !== 'object') return 'output_schema root must have type "object"'
  const problem = walk(root, '#', 1)
  if (problem) return problem
  const costly = schemaCostProblem(root)
  if (costly) return `output_schema ${costly}`
  try {
    schemaCompiler().compile(root)
  } catch (err) {
    if (err instanceof UnsupportedPattern) return `output_schema ${err.message}`
    return `output_schema is not a valid JSON Schema: ${(err as Error).message}`
  }
  return null
}

const SCHEMA_MAPS = ['properties', 'patternProperties', '$defs', 'definitions'] as const
const SCHEMA_LISTS = ['anyOf', 'oneOf', 'allOf', 'prefixItems'] as const
const SCHEMA_ONE = ['items', 'not', 'additionalProperties', 'contains', 'if', 'then', 'else'] as const

/** Walks subschemas only (never `required` or `enum` values); each subschema is one level deeper. */
function walk(node: unknown, path: string, depth: number): string | null {
  if (typeof node !== 'object' || node === null || Array.isArray(node)) return null
  if (depth > MAX_DEPTH) return `output_schema is nested deeper than ${MAX_DEPTH} levels at ${path}`
  const obj = node as Record<string, unknown>
  if (typeof obj.$ref === 'string' && !obj.$ref.startsWith('#')) return `output_schema $ref at ${path} points outside the document`
  const types = Array.isArray(obj.type) ? obj.type : [obj.type]
  if (types.includes('object') || 'properties' in obj) {
    const properties = (obj.properties ?? {}) as Record<string, unknown>
    const required = Array.isArray(obj.required) ? obj.required : []
    const missing = Object.keys(properties).filter((key) => !required.includes(key))
    if (missing.length > 0)
      return (
        `output_schema object at ${path} must list every property in required (missing: ${missing.join(', ')}); ` +
        'express an optional one as type [T, "null"]'
      )
    if (obj.additionalProperties !== false) return `output_schema object at ${path} must set additionalProperties: false`
  }
  const children: [string, unknown][] = []
  for (const key of SCHEMA_MAPS) {
    const map = obj[key]
    if (map && typeof map === 'object') for (const [name, child] of Object.entries(map)) children.push([`${path}/${key}/${name}`, child])
  }
  for (const key of SCHEMA_LISTS) {
    const list = obj[key]
    if (Array.isArray(list)) list.forEach((child, i) => children.push([`${path}/${key}/${i}`, child]))
  }
  for (const key of SCHEMA_ONE) if (key in obj) children.push([`${path}/${key}`, obj[key]])
  for (const [childPath, child] of children) {
    const problem = walk(child, childPath, depth + 1)
    if (problem) return problem
  }
  return null
}

/** Compiles an accepted schema for checking answers. */
export function compileOutputSchema(schema: Record<string, unknown>): ValidateFunction {
  return schemaCompiler({ allErrors: false }).compile(schema)
}
