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

/** Closed for good: no follow-up, no resume (contract section 5). */
export const CLOSED_STATUSES: readonly SessionStatus[] = ['cancelled', 'expired']

export const MACHINE_STATES = ['preparing', 'running', 'pausing', 'paused', 'resuming', 'stopped'] as const
export type MachineState = (typeof MACHINE_STATES)[number]

export const PERSISTENCE_MODES = ['resumable', 'ephemeral'] as const
export type PersistenceMode = (typeof PERSISTENCE_MODES)[number]

export const RUN_MODES = ['headless', 'interactive'] as const
export type RunMode = (typeof RUN_MODES)[number]

export const CAPTURE_STATES = ['complete', 'partial', 'failed'] as const
export type CaptureState = (typeof CAPTURE_STATES)[number]
