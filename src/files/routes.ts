import { Elysia } from 'elysia'
import type { AuthService } from '../identity/auth'
import { orgScope } from '../http/auth'
import { UPLOAD_FILE_LIMIT } from '../http/body'
import { errorResponses, errorModel } from '../http/errors'
import { fileModels, UploadBody } from './model'
import { OrgParams } from '../domain/api-schemas'
import { fileTooLarge, type FileService } from './service'

/** Uploads for shape B file blocks (contract section 8). Signed-in callers only: a key run sends text blocks alone. */
export const fileRoutes = (auth: AuthService, files: FileService) =>
  new Elysia({ name: 'agentd/files' })
    .use(errorModel)
    .use(fileModels)
    .use(orgScope(auth, { media: 'formdata' }))
    .post(
      '/o/:org/files',
      async ({ access, principal, body, set }) => {
        const file = body.file
        if (file.size > UPLOAD_FILE_LIMIT) throw fileTooLarge(UPLOAD_FILE_LIMIT)
        const uploaded = files.upload(principal, access, file.name, file.type, new Uint8Array(await file.arrayBuffer()))
        set.status = 201
        return uploaded
      },
      {
        params: OrgParams,
        body: UploadBody,
        response: { 201: 'UploadedFile', ...errorResponses(400, 401, 403, 404, 413, 429) },
        detail: {
          operationId: 'files.upload',
          tags: ['files'],
          summary:
            'Upload a file for a shape B file block (multipart, one `file` part, at most 32 MiB); unused uploads expire after 7 days',
        },
      },
    )
