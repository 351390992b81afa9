import { Elysia, t } from 'elysia'

/** An uploaded file (contract section 8); `id` is what a file block's `file_id` names. */
export const UploadedFile = t.Object({
  id: t.String({ description: '`file_<id>`' }),
  name: t.String(),
  mime: t.String(),
  size: t.Integer({ minimum: 0 }),
  expired_at: t.Union([t.String({ format: 'date-time' }), t.Null()], { description: 'When an upload no session uses is removed.' }),
})

/** `multipart/form-data` with one `file` part. */
export const UploadBody = t.Object({ file: t.File({ description: 'At most 32 MiB (413 PAYLOAD_TOO_LARGE over it).' }) })

/** This feature's named models: each one component of the OpenAPI document, referenced by name from its routes. */
export const fileModels = new Elysia({ name: 'agentd/models/files' }).model({ UploadedFile })
