/**
 * A moment in the reader's local time, as `2026-11-29 14:05`: unambiguous in every locale, and
 * without Intl, whose first use costs some 30 ms (ICU starting) in the list's first draw.
 */
export function when(iso: string): string {
  const at = new Date(iso)
  if (Number.isNaN(at.getTime())) return iso
  const two = (n: number) => String(n).padStart(2, '0')
  return `${at.getFullYear()}-${two(at.getMonth() + 1)}-${two(at.getDate())} ${two(at.getHours())}:${two(at.getMinutes())}`
}
