import { Type } from '@sinclair/typebox'
import { HARNESSES } from './harness'
import { literals } from './schema-util'
import { SESSION_STATUSES } from './status'

// The API's schemas that more than one feature answers with or reads (a session's status, a
// harness, an artifact, a session's path): stated once, below every feature that uses them.

export const SessionStatusSchema = literals(SESSION_STATUSES)
export const HarnessSchema = literals(HARNESSES)

export const ArtifactFile = Type.Object({ name: Type.String(), size: Type.Integer(), content_type: Type.String() })

/** The path of an org's own resources: `/o/{org}/…`. */
export const OrgParams = Type.Object({ org: Type.String() })

/** The path of everything under one session: `/o/{org}/p/{project}/sessions/{session}…`. */
export const SessionParams = Type.Object({ org: Type.String(), project: Type.String(), session: Type.String() })

/** Who started a session, as a session's views show it (null for an API key's run). */
export interface StartedBy {
  name: string | null
  avatar_url: string | null
}
