"""Benchmark (not a test): the axis (a) shell parse (analysis/rules/shell.py).

    .venv/bin/python benchmarks/bench_shell.py [--commands 20000] [--archive DIR]

Prints (1) parse throughput on N *distinct* agent-like Bash commands (the cache never hits: every
command is parsed and walked), and (2) with --archive, the time `shell_ops` adds to a scoring pass
over that archive's loaded events (commands repeat across runs, and each distinct one is parsed once).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from analysis.rules import shell  # noqa: E402

TEMPLATES = (
    "cat docs/adr/{n:04d}-x.md | head -{k}",
    "grep -rn '{w}' lib/ test/ | head -{k}",
    "cd /tmp/sb{n} && ls -la docs/adr && git status --short",
    'git add -A && git commit -qm "Fix {w} in lib/relay/{w}.rb (see docs/adr/{n:04d})"',
    'for f in docs/adr/*.md; do echo "== $f"; head -{k} "$f"; done',
    "bash -c 'rg -n {w} docs lib | wc -l'",
    "ruby -Ilib -e 'require \"relay/{w}\"; puts Relay::{w}' 2>&1 | tail -{k}",
    "cat > lib/relay/{w}.rb <<'EOF'\nmodule Relay\n  # {w} {n}\nend\nEOF",
    "find . -name '*{w}*.rb' -exec grep -l {w} {{}} + | xargs wc -l",
    "sed -n '{k},{n}p' lib/relay/{w}.rb && echo done-{n}",
)
WORDS = ("retry", "sign", "deliver", "clock", "reports", "receiver", "dedup", "header", "utc", "queue")


def commands(n: int) -> list[str]:
    rng = random.Random(7)
    out = set()
    while len(out) < n:
        t = rng.choice(TEMPLATES)
        out.add(t.format(n=rng.randint(1, 99999), k=rng.randint(1, 400), w=rng.choice(WORDS)))
    return sorted(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commands", type=int, default=20_000)
    ap.add_argument("--archive", type=Path)
    args = ap.parse_args()
    cmds = commands(args.commands)
    shell.command_ops.cache_clear()
    t = time.perf_counter()
    facts = sum(len(shell.command_ops(c)) for c in cmds)
    s = time.perf_counter() - t
    print(f"{len(cmds)} distinct commands parsed and walked in {s:.2f} s "
          f"({len(cmds) / s:,.0f}/s, {s / len(cmds) * 1e6:.0f} us each), {facts} facts")  # fmt: skip
    if args.archive:
        import duckdb

        from analysis.checker import load_inputs

        _, events, _ = load_inputs(args.archive)
        con = duckdb.connect()
        con.register("_events", events.rechunk())
        con.execute("CREATE TABLE events AS SELECT * FROM _events")
        shell.command_ops.cache_clear()
        t = time.perf_counter()
        shell.register_shell_table(con)
        s = time.perf_counter() - t
        n_bash, n_distinct, n_facts = con.execute(
            "SELECT count(*), count(DISTINCT json_extract_string(tool_input, '$.command')), "
            "(SELECT count(*) FROM shell_ops) FROM events WHERE tool_name = 'Bash'"
        ).fetchone() or (0, 0, 0)
        print(f"register_shell_table over {args.archive}: {n_bash} Bash calls ({n_distinct} distinct), "
              f"{n_facts} facts, {s:.3f} s")  # fmt: skip


if __name__ == "__main__":
    main()
