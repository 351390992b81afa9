import { expect, test } from 'bun:test'
import { setupLines } from '../../console/setup-log'

test('the setup lines of a session log: the script’s output and agentd’s lines about setup and prebuilt images, nothing else', () => {
  const logs = [
    '2026-11-29T05:21:01.000Z agentd: status allocating',
    '2026-11-29T05:21:02.762Z agentd: setup started',
    'setup: hello from setup',
    'setup: npm warn setup: not a line agentd wrote, still the script’s',
    '2026-11-29T05:21:02.781Z agentd: setup failed: exit 3',
    '2026-11-29T05:21:02.781Z agentd: setup timed out after 120 s',
    'setup: reused prebuilt image 4c59aad2',
    '2026-11-29T05:21:02.980Z agentd: kept prebuilt image 4c59aad2',
    '2026-11-29T05:21:02.990Z agentd: prebuilt image not kept: disk full',
    '2026-11-29T05:21:03.000Z agentd: status running',
    'harness: reading setup.py',
    '2026-11-29T05:21:04.000Z egress denied: example.com:443',
    '',
  ].join('\n')
  expect(setupLines(logs)).toEqual([
    '2026-11-29T05:21:02.762Z agentd: setup started',
    'setup: hello from setup',
    'setup: npm warn setup: not a line agentd wrote, still the script’s',
    '2026-11-29T05:21:02.781Z agentd: setup failed: exit 3',
    '2026-11-29T05:21:02.781Z agentd: setup timed out after 120 s',
    'setup: reused prebuilt image 4c59aad2',
    '2026-11-29T05:21:02.980Z agentd: kept prebuilt image 4c59aad2',
    '2026-11-29T05:21:02.990Z agentd: prebuilt image not kept: disk full',
  ])
  expect(setupLines('2026-11-29T05:21:01.000Z agentd: status completed\n')).toEqual([])
})
