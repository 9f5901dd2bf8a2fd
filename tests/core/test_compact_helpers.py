"""Helpers for the compaction and merge tests: runs committed through the archive's own commit
protocol (real Parquet files), with the slot, outcome and frozen-part manifest a test needs.

Also a recorder loop, run as a separate process by the concurrency test:
    python tests/core/test_compact_helpers.py ARCHIVE STOP_FILE
commits runs until STOP_FILE exists, printing each run id once it is committed.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import uuid
from pathlib import Path
from typing import Any

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from evalb.archive import Archive
from evalb.schema import ArtifactRecord, JudgementRecord, ScoreRecord, run_record
from evalb.transcript import parse_lines

MANIFEST = {
    "fixture": "f" * 64,
    "plugin": "p" * 64,
    "scenario:R1": "1" * 64,
    "judge_rubric": "r" * 64,
    "checker_rules": "c" * 64,
}


def lines_for(run_id: str, n: int) -> list[str]:
    out = ['{"type":"system","subtype":"init","session_id":"s","model":"m"}']
    for i in range(n):
        out.append(
            json.dumps(
                {
                    "type": "assistant",
                    "message": {
                        "id": f"m{i}",
                        "role": "assistant",
                        "content": [{"type": "text", "text": f"{run_id} line {i}"}],
                    },
                }
            )
        )
    out.append('{"type":"result","subtype":"success","is_error":false,"num_turns":1}')
    return out


def commit(
    archive: Archive,
    *,
    slot: str | None = None,
    rep: int = 0,
    outcome: str = "completed",
    attempt: int = 1,
    manifest: dict[str, str] | None = None,
    run_id: str | None = None,
    n_events: int = 3,
    started_at: dt.datetime | None = None,
) -> str:
    """Commit one run (runs, events and artifacts files) and return its id."""
    run_id = run_id or uuid.uuid4().hex
    started = started_at or dt.datetime.now(dt.UTC)
    fields: dict[str, Any] = {
        "run_id": run_id,
        "slot": slot or f"R1|scripted:oracle|{'p' * 16}|{rep}",
        "source": "record",
        "scenario": "R1",
        "variant": "R1",
        "model_alias": "scripted:oracle",
        "model_id": "m",
        "rep": rep,
        "attempt": attempt,
        "started_at": started,
        "ended_at": started + dt.timedelta(seconds=1),
        "duration_ms": 1000,
        "exit_code": 0,
        "outcome": outcome,
        "outcome_detail": "test",
        "reached_model": True,
        "hook_seen": False,
        "hook_note": None,
        "client_version": "1",
        "client_path": "claude",
        "session_id": "s",
        "result_subtype": "success",
        "num_turns": 1,
        "cost_usd": 0.0,
        "input_tokens": 1,
        "output_tokens": 1,
        "cache_read_tokens": 0,
        "cache_creation_tokens": 0,
        "api_retries": 0,
        "plugin_name": "os-adr",
        "plugin_version": "1",
        "plugin_hash": (manifest or MANIFEST)["plugin"],
        "plugin_dir": "/p",
        "fixture_hash": None,
        "scenario_hash": None,
        "rubric_hash": None,
        "rules_hash": None,
        "manifest_json": json.dumps(manifest or MANIFEST, sort_keys=True),
        "confinement": "bwrap",
        "stderr": "",
        "n_lines": n_events + 2,
        "n_malformed": 0,
        "recorder_version": "test",
        "host": "h",
        "options_json": "{}",
        "capture_json": None,
    }
    run = run_record(**fields)
    arts = [
        ArtifactRecord(
            run_id=run_id, path=f"docs/adr/{run_id[:6]}.md", kind="file", change="added", mode=0o644,
            size=3, sha256=None, content="adr",
        )
    ]  # fmt: skip
    archive.commit_run(run, parse_lines(run_id, lines_for(run_id, n_events)), arts)
    return run_id


def score_rows(run_ids: list[str], checker: str = "c1") -> list[ScoreRecord]:
    at = dt.datetime.now(dt.UTC)
    return [
        ScoreRecord(
            run_id=r, checker_hash=checker, scored_at=at, scenario="R1", variant="R1",
            model_alias="scripted:oracle", plugin_hash="p", rep=0, valid=True, invalid_reason=None,
            axis_a=True, axis_b=True, passed=True, verdict="PASS", reasons="ok", evidence_a=[1], evidence_b=[2],
        )
        for r in run_ids
    ]  # fmt: skip


def judgement_rows(run_ids: list[str]) -> list[JudgementRecord]:
    at = dt.datetime.now(dt.UTC)
    return [
        JudgementRecord(run_id=r, rubric_hash="rb", judge="j", verdict="YES", raw_output="YES", judged_at=at)
        for r in run_ids
    ]


def _recorder_loop(root: str, stop: str) -> None:
    archive = Archive(root)
    archive.ensure()
    rep = 0
    while not Path(stop).exists():
        rid = commit(archive, rep=rep, n_events=2)
        print(rid, flush=True)
        rep += 1


if __name__ == "__main__":
    _recorder_loop(sys.argv[1], sys.argv[2])
