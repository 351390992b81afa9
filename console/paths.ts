/** The console's own paths, under /console (the server answers every one with the same page). */
export const BASE = '/console'

/** Whether a console path (after /console) shows the sessions list. */
export function isListPath(path: string): boolean {
  return path === '' || path === '/'
}
