import { t } from 'elysia'

export const StatechartQuery = t.Object(
  {
    session: t.Optional(
      t.String({
        minLength: 1,
        description: 'A session in one of the caller’s orgs: its state is highlighted and its transitions listed',
      }),
    ),
  },
  { additionalProperties: false },
)

export const HtmlPage = t.String({ description: 'text/html' })
