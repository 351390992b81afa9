import { LinearDocument } from '@linear/sdk'
import { Kind, parse, print, type DocumentNode, type FragmentDefinitionNode, type SelectionSetNode } from 'graphql'

export interface LinearIssue {
  identifier: string
  workspace: string
  title: string
  description: string | null
  comments: { body: string; createdAt: string }[]
}

export interface LinearStandIn {
  /** Its GraphQL endpoint (AGENTD_LINEAR_API_URL). */
  url: string
  /** The operations it answered, by the SDK document's name. */
  operations: string[]
  /** What made it refuse a request (an unknown query, a missing field): empty while all was as the SDK sends it. */
  problems: string[]
  stop(): void
}

/** Every query document the published @linear/sdk sends, by its printed text. */
const SDK_DOCUMENTS = new Map<string, string>(
  Object.entries(LinearDocument as Record<string, unknown>)
    .filter(([name]) => name.endsWith('Document'))
    .map(([name, text]) => [print(parse(String(text))), name]),
)

/**
 * Linear's GraphQL API as far as agentd reads it (an issue and its comments), on a free port. It
 * answers only queries that are, to the character once printed, documents of the published
 * `@linear/sdk` (anything else is a problem, recorded and answered 400), with exactly the fields
 * each selects, resolved through its fragments: the stand-in cannot drift from what the SDK asks.
 * Fields the fixtures do not set are null. Requests need a bearer token `authorized` accepts.
 */
export function startLinearStandIn(issues: LinearIssue[], authorized: (token: string) => Promise<boolean>): LinearStandIn {
  const operations: string[] = []
  const problems: string[] = []
  const server = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    async fetch(request) {
      const body = (await request.json().catch(() => null)) as { query?: string; variables?: Record<string, unknown> } | null
      let document: DocumentNode
      try {
        document = parse(body?.query ?? '')
      } catch (err) {
        problems.push(`unparsable query: ${(err as Error).message}`)
        return Response.json({ errors: [{ message: 'unparsable query' }] }, { status: 400 })
      }
      const name = SDK_DOCUMENTS.get(print(document))
      if (!name) {
        problems.push(`a query the published SDK does not send: ${body?.query?.slice(0, 200)}`)
        return Response.json({ errors: [{ message: 'unknown query' }] }, { status: 400 })
      }
      const token = /^Bearer (.+)$/.exec(request.headers.get('authorization') ?? '')?.[1]
      if (!token || !(await authorized(token)))
        return Response.json(
          { errors: [{ message: 'Authentication required, not authenticated', extensions: { code: 'AUTHENTICATION_ERROR' } }] },
          { status: 401 },
        )
      operations.push(name)
      const id = String(body?.variables?.id ?? '')
      const issue = issues.find((i) => i.identifier === id || `issue-${i.identifier}` === id)
      if (!issue)
        return Response.json({ data: null, errors: [{ message: 'Entity not found: Issue', extensions: { code: 'INVALID_INPUT' } }] })
      try {
        return Response.json({ data: { issue: select(document, issueObject(issue), problems) } })
      } catch (err) {
        problems.push((err as Error).message)
        return Response.json({ errors: [{ message: (err as Error).message }] }, { status: 500 })
      }
    },
  })
  return { url: `http://127.0.0.1:${server.port}/graphql`, operations, problems, stop: () => server.stop(true) }
}

function issueObject(issue: LinearIssue): Record<string, unknown> {
  const at = '2026-11-02T09:00:00.000Z'
  return {
    __typename: 'Issue',
    id: `issue-${issue.identifier}`,
    identifier: issue.identifier,
    title: issue.title,
    description: issue.description,
    url: `https://linear.app/${issue.workspace}/issue/${issue.identifier}/${issue.title.toLowerCase().replaceAll(/[^a-z0-9]+/g, '-')}`,
    createdAt: at,
    updatedAt: at,
    number: Number(issue.identifier.split('-')[1]),
    priority: 0,
    // Non-null in Linear's schema: the SDK's Issue model reads them unguarded.
    sharedAccess: {
      __typename: 'IssueSharedAccess',
      isShared: false,
      sharedWithCount: 0,
      viewerHasOnlySharedAccess: false,
      disallowedIssueFields: [],
      sharedWithUsers: [],
    },
    reactions: [],
    comments: {
      __typename: 'CommentConnection',
      nodes: issue.comments.map((c, i) => ({
        __typename: 'Comment',
        id: `comment-${issue.identifier}-${i}`,
        body: c.body,
        createdAt: c.createdAt,
        updatedAt: c.createdAt,
        url: `https://linear.app/${issue.workspace}/issue/${issue.identifier}#comment-${i}`,
        reactions: [],
      })),
      pageInfo: { __typename: 'PageInfo', hasNextPage: false, hasPreviousPage: false, startCursor: null, endCursor: null },
    },
  }
}

/** The query's `issue` field answered from `issue`: exactly the fields its selection (and fragments) name. */
function select(document: DocumentNode, issue: Record<string, unknown>, problems: string[]): unknown {
  const fragments = new Map(
    document.definitions.filter((d): d is FragmentDefinitionNode => d.kind === Kind.FRAGMENT_DEFINITION).map((d) => [d.name.value, d]),
  )
  const operation = document.definitions.find((d) => d.kind === Kind.OPERATION_DEFINITION)
  if (!operation || operation.kind !== Kind.OPERATION_DEFINITION) throw new Error('no operation in the query')
  const root = operation.selectionSet.selections.find((s) => s.kind === Kind.FIELD && s.name.value === 'issue')
  if (!root || root.kind !== Kind.FIELD || !root.selectionSet) throw new Error('the query asks for no issue')
  const walk = (set: SelectionSetNode, value: Record<string, unknown>, path: string): Record<string, unknown> => {
    const out: Record<string, unknown> = {}
    for (const selection of set.selections) {
      if (selection.kind === Kind.FIELD) {
        const key = selection.alias?.value ?? selection.name.value
        const field = selection.name.value === '__typename' ? value.__typename : value[selection.name.value]
        if (!selection.selectionSet) out[key] = field ?? null
        else if (field === undefined || field === null) out[key] = null
        else if (Array.isArray(field)) out[key] = field.map((item, i) => walk(selection.selectionSet!, item, `${path}.${key}[${i}]`))
        else out[key] = walk(selection.selectionSet, field as Record<string, unknown>, `${path}.${key}`)
      } else {
        const fragment = selection.kind === Kind.FRAGMENT_SPREAD ? fragments.get(selection.name.value) : selection
        if (!fragment) {
          problems.push(`${path}: a fragment the query does not define`)
          continue
        }
        const on = fragment.typeCondition?.name.value
        if (on && value.__typename && on !== value.__typename) continue
        Object.assign(out, walk(fragment.selectionSet, value, path))
      }
    }
    return out
  }
  return walk(root.selectionSet, issue, 'issue')
}
