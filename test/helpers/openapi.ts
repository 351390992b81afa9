/**
 * An OpenAPI document's operations with every `$ref` into `components` replaced by what it names,
 * keyed `METHOD path`: what a client sees of each route, whether a schema is inlined or a named
 * component. Lets a test hold the operations still while the components change.
 */
export function operations(doc: {
  paths: Record<string, Record<string, unknown>>
  components?: Record<string, Record<string, unknown>>
}): Record<string, unknown> {
  const resolve = (value: unknown, seen: string[]): unknown => {
    if (Array.isArray(value)) return value.map((item) => resolve(item, seen))
    if (!value || typeof value !== 'object') return value
    const ref = (value as { $ref?: unknown }).$ref
    if (typeof ref === 'string' && ref.startsWith('#/components/')) {
      if (seen.includes(ref)) throw new Error(`a recursive component: ${ref}`)
      const [, , group, name] = ref.split('/')
      const target = doc.components?.[group!]?.[name!]
      if (target === undefined) throw new Error(`a $ref to nothing: ${ref}`)
      return resolve(target, [...seen, ref])
    }
    // A model's `$id` says where it is declared among the components: not part of what it describes.
    const entries = Object.entries(value).filter(
      ([key, item]) => !(key === '$id' && typeof item === 'string' && item.startsWith('#/components/')),
    )
    return Object.fromEntries(entries.map(([key, item]) => [key, resolve(item, seen)]))
  }
  const out: Record<string, unknown> = {}
  for (const path of Object.keys(doc.paths).sort()) {
    for (const method of Object.keys(doc.paths[path]!).sort())
      out[`${method.toUpperCase()} ${path}`] = resolve(doc.paths[path]![method], [])
  }
  return out
}

/** One operation per line: a fixture whose diff names the route that changed. */
export function operationsText(ops: Record<string, unknown>): string {
  return `{\n${Object.entries(ops)
    .map(([key, op]) => `  ${JSON.stringify(key)}: ${JSON.stringify(op)}`)
    .join(',\n')}\n}\n`
}
