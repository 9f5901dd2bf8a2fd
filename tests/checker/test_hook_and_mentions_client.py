"""Genuine client transcripts: another plugin's hook note alone makes a run INVALID, and Bash that
only mentions docs/adr does not consult it, while Bash that reads it (pipeline, `bash -c`) does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from analysis.checker import score_archive
from analysis.judge import KeywordJudge
from evalb import paths
from tests.conftest import record_grid
from tests.hardening.helpers import record_shell

pytestmark = pytest.mark.client

FOREIGN = "[superpowers] You have superpowers. Read the skills list before you start."
IMPORT = str(Path(sys.executable).parent / "evalb-record")


def _lines(root: Path) -> list[str]:
    """The one run's stdout lines, as the client wrote them."""
    ev = pl.read_parquet(str(root / "events" / "*.parquet"))
    return ev.group_by("seq").agg(pl.col("raw").first()).sort("seq")["raw"].to_list()


def _foreign(line: str) -> str:
    """A SessionStart hook_response rewritten as another plugin's: its note carries no [os-adr]."""
    obj = json.loads(line)
    if obj.get("subtype") != "hook_response":
        return line
    out = json.dumps({"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": FOREIGN}})
    obj["output"] = obj["stdout"] = out + "\n"
    return json.dumps(obj, separators=(",", ":"))


def test_foreign_hook_note_is_invalid(tmp_path: Path) -> None:
    rec = tmp_path / "recorded"
    record_grid(rec, ["R1"], ["scripted:oracle"], 1, jobs=1)
    lines = _lines(rec)
    assert sum('"subtype":"hook_response"' in ln and "[os-adr]" in ln for ln in lines) == 1
    files = {"own": tmp_path / "own.jsonl", "foreign": tmp_path / "foreign.jsonl"}
    files["own"].write_text("\n".join(lines) + "\n")
    files["foreign"].write_text("\n".join(_foreign(ln) for ln in lines) + "\n")
    hook_line = next(ln for ln in files["foreign"].read_text().splitlines() if "hook_response" in ln)
    assert "[os-adr]" not in hook_line
    imported = tmp_path / "imported"
    for f in files.values():
        p = subprocess.run(
            [IMPORT, "import", str(f), "--scenario", "R1", "--model", "scripted:oracle",
             "--archive", str(imported), "--plugin-dir", str(paths.REFERENCE_PLUGIN)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert p.returncode == 0, p.stderr
    sp = score_archive(imported, judge=KeywordJudge(), write=False)
    by_verdict = {r["verdict"]: r for r in sp.scores.iter_rows(named=True)}
    assert set(by_verdict) == {"PASS", "INVALID"}
    assert by_verdict["INVALID"]["invalid_reason"].startswith(
        "no SessionStart hook note from the plugin ([os-adr] marker)"
    )
    assert by_verdict["PASS"]["valid"] is True


def test_mentions_do_not_consult_reads_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "a"
    mentions = [
        'echo "I should read docs/adr first"',
        'git commit -q --allow-empty -m "Follow docs/adr/0002"',
        "cat > NOTES.md <<'EOF'\nsee docs/adr/0002 before changing signing\nEOF",
        'grep -rn "docs/adr" lib/ || true',
    ]
    reads = ["cat docs/adr/0002-*.md | head -5", "bash -c 'ls docs/adr'"]
    record_shell(root, tmp_path, mentions, monkeypatch=monkeypatch, final="Done.")
    record_shell(root, tmp_path, reads, variant="R2", monkeypatch=monkeypatch, final="Done.")
    ev = pl.read_parquet(str(root / "events" / "*.parquet"))
    results = "".join(t or "" for t in ev.filter(pl.col("block_type") == "tool_result")["text"])
    assert "0001-" in results  # the `ls docs/adr` really ran and listed the ADRs
    sp = score_archive(root, judge=KeywordJudge(), write=False)
    got = {r["variant"]: (r["valid"], r["axis_a"]) for r in sp.scores.iter_rows(named=True)}
    assert got == {"R1": (True, False), "R2": (True, True)}
