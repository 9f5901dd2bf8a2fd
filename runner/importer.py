"""Importing a transcript recorded elsewhere (the old bash harness, or the client by hand)."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import socket
import uuid
from pathlib import Path

from evalb import __version__, manifest
from evalb import sandbox as sandboxes
from evalb.archive import Archive
from evalb.errors import UsageError
from evalb.scenarios import resolve_variant
from evalb.schema import RunRecord, run_record
from evalb.transcript import parse_bytes
from runner import capture
from runner.client import classify


def import_transcript(
    transcript: Path,
    archive: Archive,
    *,
    scenario: str,
    model: str,
    sandbox: Path | None = None,
    plugin_dir: Path | None = None,
    rep: int = 0,
) -> RunRecord | None:
    """Archive one JSONL transcript (malformed lines kept raw and flagged); None if already imported."""
    sc, variant = resolve_variant(scenario)
    try:
        data = transcript.read_bytes()
    except OSError as e:
        raise UsageError(f"cannot read transcript {transcript}: {e.strerror}") from e
    if sandbox is not None and not sandbox.is_dir():
        raise UsageError(
            f"--sandbox {sandbox} is not a directory",
            hint=f"pass the sandbox the client ran in (built with `evalb sandbox {variant.id} DIR`)",
        )
    archive.ensure()
    digest = hashlib.sha256(data).hexdigest()
    slot = f"import|{variant.id}|{model}|{digest[:16]}"
    if slot in archive.committed_slots():
        return None
    run_id = uuid.uuid4().hex
    # lines end at b"\n" only (never str.splitlines: NEL or U+2028 inside a JSON string is no line
    # end); a line that is not UTF-8 is kept as base64
    events, summary = parse_bytes(run_id, data)
    exit_code = 0 if summary.result is not None else None
    outcome, detail = classify(exit_code, summary, timed_out=False, timeout=0, stop=[])
    if summary.result is None:
        detail = "imported transcript has no result event (the client was stopped or its output cut)"
    result = summary.result or {}
    frozen = manifest.frozen_manifest()
    plugin = manifest.plugin_identity(plugin_dir) if plugin_dir else (None, None, None)
    mtime = dt.datetime.fromtimestamp(transcript.stat().st_mtime, dt.UTC)
    run = run_record(
        summary,
        run_id=run_id,
        slot=slot,
        source="import",
        scenario=sc.id,
        variant=variant.id,
        model_alias=model,
        rep=rep,
        attempt=1,
        started_at=mtime,
        ended_at=mtime,
        duration_ms=result.get("duration_ms") if isinstance(result.get("duration_ms"), int) else None,
        exit_code=exit_code,
        outcome=outcome,
        outcome_detail=f"imported from {transcript.name}: {detail}",
        client_path="(imported)",
        plugin_name=plugin[0],
        plugin_version=plugin[1],
        plugin_hash=plugin[2],
        plugin_dir=str(plugin_dir) if plugin_dir else None,
        fixture_hash=frozen.get("fixture"),
        scenario_hash=sc.sha256,
        rubric_hash=frozen.get("judge_rubric"),
        rules_hash=frozen.get("checker_rules"),
        manifest_json=json.dumps(frozen, sort_keys=True),
        confinement="n/a (imported)",
        stderr="",
        recorder_version=__version__,
        host=socket.gethostname(),
        options_json=json.dumps({"imported_from": str(transcript), "sha256": digest}),
    )
    arts = []
    if sandbox is not None:
        # The initial tree comes from the fixture, never from the sandbox (the agent owned it).
        end = capture.collect(run_id, sandbox.resolve(), sandboxes.initial_tree(variant.id))
        run = run.model_copy(update={"capture_json": end.summary_json()})
        arts = end.rows
    archive.commit_run(run, events, arts)
    return run
