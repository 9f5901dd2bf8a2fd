"""Golden transcripts (files named for what they show) score as their names say.

The `real-*` files are genuine output of the client (see /work/shared/transcripts); the others
were written with analysis.fabricate. W runs are judged by a stub judge command.
"""

from __future__ import annotations

import sys

import pytest

from analysis.judge import CommandJudge
from tests.checker.helpers import Runs, ab, read_golden

STUB = (
    f"{sys.executable} -c \"import sys; print('YES' if 'propose recording' in sys.stdin.read() else 'NO')\""
)

GOLDEN = {
    # file: (variant, A, B, verdict)
    "real-R1-ls-adr-cites-0002-pass.jsonl": ("R1", "PASS", "PASS", "PASS"),
    "real-no-hook-invalid.jsonl": ("R1", "-", "-", "INVALID"),
    "real-W1-skill-proposes-record.jsonl": ("W1", "PASS", "PASS", "PASS"),
    "R1-subagent-reads-adr-pass.jsonl": ("R1", "PASS", "PASS", "PASS"),
    "R1-prose-only-mention-A-fail.jsonl": ("R1", "FAIL", "PASS", "FAIL"),
    "R2-names-0001-superseded-pass.jsonl": ("R2", "PASS", "PASS", "PASS"),
    "R2-cites-0001-as-live-B-fail.jsonl": ("R2", "PASS", "FAIL", "FAIL"),
    "R2-project-wide-grep-A-fail.jsonl": ("R2", "FAIL", "FAIL", "FAIL"),
    "R3-utc-iso8601-pass.jsonl": ("R3", "PASS", "PASS", "PASS"),
    "R3-wrong-convention-B-fail.jsonl": ("R3", "PASS", "FAIL", "FAIL"),
}


@pytest.fixture(scope="module")
def scored(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    runs = Runs(tmp_path_factory.mktemp("golden"))
    for name, (variant, *_) in GOLDEN.items():
        runs.add(name, read_golden(name), variant)
    return runs.score(judge=CommandJudge(STUB))


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden(scored, name) -> None:
    """The golden transcript gets the verdict its file name announces."""
    _, a, b, verdict = GOLDEN[name]
    row = scored[name]
    assert (ab(row["axis_a"]), ab(row["axis_b"]), row["verdict"]) == (a, b, verdict), row["reasons"]
    if verdict != "INVALID":
        assert row["evidence_a"] or a == "FAIL"
        assert row["evidence_b"] or b == "FAIL"
