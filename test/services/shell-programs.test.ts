import { describe, expect, test } from 'bun:test'
import { shellPrograms } from '../../src/transcript/shell-programs'

describe('shellPrograms', () => {
  const cases: [string, string[]][] = [
    ['ls / | head -3', ['ls', 'head']],
    ['false', ['false']],
    ['make && make test || echo failed; date &', ['make', 'echo', 'date']],
    ['grep x f |& sort -u', ['grep', 'sort']],
    // Codex wraps every command in a login shell; the script is what runs.
    ["/bin/bash -lc 'ls / | head -3'", ['ls', 'head']],
    ['/bin/bash -lc false', ['false']],
    [`/bin/bash -lc "mkdir -p '/w/notes' && printf '%s' 'hi' > '/w/notes/a.txt'"`, ['mkdir', 'printf']],
    [`sh -c 'bash -c "cut -f1 x | uniq"'`, ['cut', 'uniq']],
    ['bash script.sh', ['bash']],
    // Programs are named without their directory.
    ['/usr/bin/env python3 -V', ['python3']],
    // Assignments, redirections and their targets are not programs.
    ['FOO=1 BAR=2 node app.js 2>/dev/null > out.log < in.txt', ['node']],
    ['env -u HOME A=1 python3 x.py', ['python3']],
    ['sudo -u bob ls', ['ls']],
    ['timeout 5 sleep 10', ['sleep']],
    ['nohup ./serve &', ['serve']],
    // Quotes and escapes keep operators inside arguments.
    ['echo \'a | b && c\' "d ; e" f\\;g', ['echo']],
    // Newlines separate commands, but not inside quotes; comments are not commands.
    ['cd src\nnpm test # then; rm -rf /\ngit status', ['cd', 'npm', 'git']],
    ['echo "one\ntwo" && wc -l', ['echo', 'wc']],
    ['ls \\\n  -la && pwd', ['ls', 'pwd']],
    // A heredoc's body is text.
    ["cat > f.txt <<'EOF'\nrm -rf /\nEOF\nchmod +x f.txt", ['cat', 'chmod']],
    ['cat <<-END\n\trm x\n\tEND\nls', ['cat', 'ls']],
    // Compound commands: keywords and loop heads are syntax.
    ['for f in *.txt; do wc -l "$f"; done', ['wc']],
    ['if [ -f x ]; then cat x; else touch x; fi', ['[', 'cat', 'touch']],
    ['while read l; do echo $l; done < list', ['read', 'echo']],
    ['(cd sub && make) && ls', ['cd', 'make', 'ls']],
    ['echo $(date +%s)', ['echo', 'date']],
    ['ls; ls; ls', ['ls']],
    ['', []],
    ['   # only a comment', []],
  ]
  for (const [command, programs] of cases) {
    test(JSON.stringify(command), () => expect(shellPrograms(command)).toEqual(programs))
  }
})
