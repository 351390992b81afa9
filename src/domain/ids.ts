import { randomBytes, randomUUID } from 'node:crypto'

export const newId = (): string => randomUUID()

/** The prefix of signed-in session tokens. */
export const USER_TOKEN_PREFIX = 'agt_'

/** Signed-in session tokens: opaque, random, only their hash is stored. */
export const newUserToken = (): string => `${USER_TOKEN_PREFIX}${randomBytes(32).toString('base64url')}`

export const sha256 = (value: string): string => Bun.SHA256.hash(value, 'hex')
