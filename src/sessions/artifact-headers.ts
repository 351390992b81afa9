/**
 * Response headers for serving an artifact. Artifacts are bytes a sandbox wrote, served from the
 * API's own origin: a browser must never run them there. Only a few passive types may show inline;
 * anything else (HTML, SVG, XML, scripts, PDFs, unknown types) is a download, and sandboxed should
 * a browser render it anyway. `nosniff` keeps a passive type from being sniffed into an active one.
 */

/** Types a browser shows without running anything in the page's origin. */
const INLINE_SAFE = new Set([
  'text/plain',
  'text/csv',
  'text/markdown',
  'application/json',
  'image/png',
  'image/jpeg',
  'image/gif',
  'image/webp',
  'image/avif',
])

export function artifactHeaders(name: string, contentType: string): Record<string, string> {
  const headers: Record<string, string> = { 'content-type': contentType, 'x-content-type-options': 'nosniff' }
  const essence = contentType.split(';')[0]!.trim().toLowerCase()
  if (!INLINE_SAFE.has(essence)) {
    headers['content-disposition'] = attachment(name)
    headers['content-security-policy'] = "sandbox; default-src 'none'"
  }
  return headers
}

/**
 * `attachment` with the file's own name (its last path segment): an ASCII-only quoted fallback
 * and the exact name in RFC 8187 form, so no quote, backslash or line break from a name the
 * sandbox chose can end the parameter or the header.
 */
export function attachment(name: string): string {
  // Well-formed first: encodeURIComponent throws on a lone surrogate.
  const base = name.slice(name.lastIndexOf('/') + 1).toWellFormed() || 'artifact'
  const fallback = base.replace(/[^\x20-\x7e]|["\\]/g, '_')
  const exact = encodeURIComponent(base).replace(/['()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)
  return `attachment; filename="${fallback}"; filename*=UTF-8''${exact}`
}
