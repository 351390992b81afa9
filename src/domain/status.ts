/** The one typed source of session status names (spec section 3). */
export const SESSION_STATUSES = [
  'queued',
  'allocating',
  'running',
  'paused',
  'input_required',
  'needs_review',
  'completed',
  'failed',
  'cancelled',
  'expired',
] as const
export type SessionStatus = (typeof SESSION_STATUSES)[number]

/**
 * Named groups of statuses, the one place each is said. What the machine decides (which event a
 * state takes) stays in the machine; these are the questions asked of a stored status.
 */
export const STATUS_GROUPS = {
  /** Holding one of its org's run slots: a sandbox is being made or a turn runs (spec 8). */
  active: ['allocating', 'running'],
  /** Not ended yet: waiting for a slot, or on its way (a key's `max_concurrent` counts these). */
  inProgress: ['queued', 'allocating', 'running'],
  /** Before its turn ended: in progress, or paused mid-turn. */
  inFlight: ['queued', 'allocating', 'running', 'paused'],
  /** Resting with a parked sandbox a resumable session can wake. */
  parkable: ['paused', 'completed', 'needs_review', 'failed', 'input_required'],
  /** Its turn is over: a live stream may end here. */
  resting: ['completed', 'needs_review', 'failed', 'input_required', 'cancelled', 'expired'],
} as const satisfies Record<string, readonly SessionStatus[]>

export type StatusGroup = keyof typeof STATUS_GROUPS

/** Whether `status` is in the named group. */
export function statusIn(group: StatusGroup, status: string): status is SessionStatus {
  return (STATUS_GROUPS[group] as readonly string[]).includes(status)
}

export const MACHINE_STATES = ['preparing', 'running', 'pausing', 'paused', 'resuming', 'stopped'] as const
export type MachineState = (typeof MACHINE_STATES)[number]

export const PERSISTENCE_MODES = ['resumable', 'ephemeral'] as const
export type PersistenceMode = (typeof PERSISTENCE_MODES)[number]

export const RUN_MODES = ['headless', 'interactive'] as const
export type RunMode = (typeof RUN_MODES)[number]

export const CAPTURE_STATES = ['complete', 'partial', 'failed'] as const
export type CaptureState = (typeof CAPTURE_STATES)[number]
