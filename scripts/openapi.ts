/** `bun run openapi`: prints the OpenAPI document of a freshly started agentd, for generating clients. */
import { openApiDocument } from './openapi-document'

process.stdout.write(`${JSON.stringify(await openApiDocument(), null, 2)}\n`)
