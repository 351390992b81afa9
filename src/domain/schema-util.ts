import { type Static, type TLiteral, type TNull, type TOptional, type TSchema, type TUnion, type TUnsafe, Type } from '@sinclair/typebox'

type Literals<T extends readonly string[]> = T extends readonly [infer H extends string, ...infer R extends string[]]
  ? [TLiteral<H>, ...Literals<R>]
  : []

/** A TypeBox union of string literals with its precise static type (`Type.UnionEnum` adds a default). */
export function literals<const T extends readonly string[]>(values: T): TUnion<Literals<T>> {
  return Type.Union(values.map((v) => Type.Literal(v))) as never
}

/** `schema` or null: a field the spec sends as null when unset. */
export function nullable<T extends TSchema>(schema: T): TUnion<[T, TNull]> {
  return Type.Union([schema, Type.Null()])
}

/** Optional fields of one type, for objects with many (`...optionalFields(Type.String, ['a', 'b'])`). */
export function optionalFields<const K extends string, T extends TSchema>(schema: () => T, keys: readonly K[]): { [P in K]: TOptional<T> } {
  return Object.fromEntries(keys.map((key) => [key, Type.Optional(schema())])) as never
}

/**
 * A `$ref` to the model registered as `name` (a component of the OpenAPI document, see
 * the feature model files), typed as `schema`, the model it names: for a resource inside a wrapper
 * (`{ data: [modelRef('Project', Project)] }`), where the `response: { 200: 'Project' }` form cannot
 * reach. Elysia validates it against the registered model, found by its `$id`.
 */
export function modelRef<T extends TSchema>(name: string, _schema: T): TUnsafe<Static<T>> {
  return Type.Unsafe<Static<T>>(Type.Ref(`#/components/schemas/${name}`))
}
