import type { TLiteral, TUnion } from '@sinclair/typebox'
import { t } from 'elysia'

type Literals<T extends readonly string[]> = T extends readonly [infer H extends string, ...infer R extends string[]]
  ? [TLiteral<H>, ...Literals<R>]
  : []

/** A TypeBox union of string literals with its precise static type (`t.UnionEnum` adds a default). */
export function literals<const T extends readonly string[]>(values: T): TUnion<Literals<T>> {
  return t.Union(values.map((v) => t.Literal(v))) as never
}
