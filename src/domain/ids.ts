import { randomBytes, randomUUID } from 'node:crypto'

export const newId = (): string => randomUUID()

/** Signed-in session tokens: opaque, random, only their hash is stored. */
export const newUserToken = (): string => `agt_${randomBytes(32).toString('base64url')}`

export const sha256 = (value: string): string => Bun.SHA256.hash(value, 'hex')
