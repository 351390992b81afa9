import type { ComponentChildren } from 'preact'
import { useEffect, useRef, useState } from 'preact/hooks'
import { onLink } from './router'

/** A session's status as a word, a shape and a colour: never the colour alone. */
const MARKS: Record<string, string> = {
  queued: '…',
  allocating: '…',
  running: '▶',
  paused: '⏸',
  input_required: '?',
  needs_review: '!',
  completed: '✓',
  failed: '✗',
  cancelled: '■',
  expired: '⌛',
}

export function StatusBadge({ status }: { status: string }) {
  return (
    <span class={`badge badge-${status}`}>
      <span aria-hidden="true">{MARKS[status] ?? '•'} </span>
      {status.replace('_', ' ')}
    </span>
  )
}

export function Link({
  href,
  children,
  ...rest
}: {
  href: string
  children: ComponentChildren
  class?: string
  'aria-current'?: 'page' | undefined
}) {
  return (
    <a href={href} onClick={onLink} {...rest}>
      {children}
    </a>
  )
}

/** An error said where the eye is, and to a screen reader at once. */
export function Problem({ text }: { text: string | null }) {
  return text ? (
    <p class="problem" role="alert">
      {text}
    </p>
  ) : null
}

/**
 * A form field's ARIA: described by its hint, and, when the last refusal named the field, marked
 * invalid and described by that refusal (shown in the element `problem`) too.
 */
export function fieldAria(named: boolean, problem: string, hint?: string): { 'aria-invalid'?: true; 'aria-describedby'?: string } {
  const ids = [hint, named ? problem : undefined].filter(Boolean).join(' ')
  return { ...(named ? { 'aria-invalid': true as const } : {}), ...(ids ? { 'aria-describedby': ids } : {}) }
}

/** A structured answer as a tree: objects and arrays open and close. */
export function JsonTree({ value, name }: { value: unknown; name?: string }) {
  const label = name === undefined ? null : <span class="json-key">{name}: </span>
  if (value !== null && typeof value === 'object') {
    const entries = Array.isArray(value) ? value.map((v, i) => [String(i), v] as const) : Object.entries(value)
    return (
      <details open class="json">
        <summary>
          {label}
          {Array.isArray(value) ? `[${entries.length}]` : `{${entries.length}}`}
        </summary>
        <ul>
          {entries.map(([key, inner]) => (
            <li key={key}>
              <JsonTree name={key} value={inner} />
            </li>
          ))}
        </ul>
      </details>
    )
  }
  return (
    <span class="json-leaf">
      {label}
      <code>{JSON.stringify(value)}</code>
    </span>
  )
}

/**
 * A list of many rows of one height, only the visible ones in the page (a thousand rows scroll as
 * twenty). Rows carry their place (aria-posinset, aria-setsize) for screen readers.
 */
export function VirtualList<T>({
  items,
  rowHeight,
  height,
  label,
  row,
}: {
  items: T[]
  rowHeight: number
  height: number
  label: string
  row(item: T): ComponentChildren
}) {
  const box = useRef<HTMLDivElement>(null)
  const [top, setTop] = useState(0)
  useEffect(() => {
    const el = box.current
    if (!el) return
    const scrolled = () => setTop(el.scrollTop)
    el.addEventListener('scroll', scrolled, { passive: true })
    return () => el.removeEventListener('scroll', scrolled)
  }, [])
  const first = Math.max(0, Math.floor(top / rowHeight) - 5)
  const last = Math.min(items.length, Math.ceil((top + height) / rowHeight) + 5)
  return (
    <div
      ref={box}
      class="virtual"
      style={{ height: `${Math.min(height, items.length * rowHeight + 2)}px` }}
      tabIndex={0}
      aria-label={label}
      role="region"
    >
      <ul role="list" style={{ height: `${items.length * rowHeight}px`, position: 'relative' }}>
        {items.slice(first, last).map((item, i) => (
          <li
            key={first + i}
            aria-posinset={first + i + 1}
            aria-setsize={items.length}
            style={{ position: 'absolute', top: `${(first + i) * rowHeight}px`, height: `${rowHeight}px`, left: 0, right: 0 }}
          >
            {row(item)}
          </li>
        ))}
      </ul>
    </div>
  )
}
