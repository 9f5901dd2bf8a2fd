"""Confinement: an adversarial scripted policy tries to write outside its sandbox and to read secrets.

`scripted:escape` (a test policy) writes into the recorder's real HOME and /var/tmp, prints its
environment's secret-looking variables, scans every /proc/PID/environ, and cats a canary file in
the real HOME. Under bwrap every attempt fails, checked in the archived tool results and on disk."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import polars as pl
import pytest

from evalb.archive import Archive
from evalb.errors import ConfinementError
from runner import confine
from runner.grid import expand, plugin_hash_of, run_grid
from runner.record import RecordOptions, rep_seed
from runner.scripted.policies import escape_targets
from tests.hardening.helpers import check_archive, run_recorder, snapshot

MODEL = "scripted:escape"


def _record(root: Path, monkeypatch: pytest.MonkeyPatch, *, confine_: bool) -> tuple[pl.DataFrame, str]:
    secret = f"sekrit-{uuid.uuid4().hex}"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("GITHUB_TOKEN", f"ghp_{secret}")
    opts = RecordOptions(confine=confine_, timeout=60)
    slots = expand(["R1"], [MODEL], 1, plugin_hash_of(opts.plugin_dir))
    run_grid(slots, Archive(root), opts, jobs=1, retries=0, progress_stream=None)
    check_archive(root)
    ev = pl.read_parquet(str(root / "events" / "*.parquet")).sort("seq", "block_index")
    results = "\n".join(t or "" for t in ev.filter(pl.col("block_type") == "tool_result")["text"])
    return ev, results.replace(secret, "<SECRET>") + ("\nLEAK" if secret in "".join(ev["raw"]) else "")


@pytest.fixture
def targets() -> dict[str, str]:
    t = escape_targets(rep_seed("R1", MODEL, 0, 0))
    canary = Path(t["home_canary"])
    canary.write_text("sekrit-canary\n")
    yield t
    canary.unlink(missing_ok=True)
    for k in ("home_file", "var_tmp_file"):
        Path(t[k]).unlink(missing_ok=True)


@pytest.mark.client
def test_confined_rep_cannot_write_outside_or_read_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, targets: dict[str, str]
) -> None:
    """Both writes fail (read-only file system), no secret reaches the session by env, /proc or HOME."""
    ev, results = _record(tmp_path / "archive", monkeypatch, confine_=True)
    runs = pl.read_parquet(str(tmp_path / "archive" / "runs" / "*.parquet"))
    assert runs["confinement"].to_list() == ["bwrap"] and runs["outcome"].to_list() == ["completed"]
    # the five attempts ran (their results are archived) ...
    assert ev.filter(pl.col("block_type") == "tool_use").height == 5
    # ... and every one failed
    assert "home write failed" in results and "WROTE-HOME" not in results
    assert "var/tmp write failed" in results and "WROTE-VAR-TMP" not in results
    assert "Read-only file system" in results
    assert "AWS=[] GH=[]" in results and "ENV: " not in results
    assert "PROC: " not in results and "proc-scan-done" in results
    assert "CANARY: sekrit" not in results and "canary-done" in results
    assert "<SECRET>" not in results and "LEAK" not in results
    # and on the file system
    assert not Path(targets["home_file"]).exists()
    assert not Path(targets["var_tmp_file"]).exists()


@pytest.mark.client
def test_unconfined_rep_shows_what_confinement_prevents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, targets: dict[str, str]
) -> None:
    """The control: with --no-confine the same policy writes into HOME and reads the canary (the
    env allow-list still keeps the secrets out), and the run records that it was unconfined."""
    _ev, results = _record(tmp_path / "archive", monkeypatch, confine_=False)
    runs = pl.read_parquet(str(tmp_path / "archive" / "runs" / "*.parquet"))
    assert runs["confinement"].to_list() == [confine.NO_CONFINEMENT]
    assert "WROTE-HOME" in results and Path(targets["home_file"]).exists()
    assert "CANARY: sekrit-canary" in results
    assert "AWS=[] GH=[]" in results and "ENV: " not in results


def test_missing_bwrap_refuses_in_one_line(tmp_path: Path) -> None:
    """Without bwrap on PATH the runner refuses (one line, exit 2, archive untouched) unless --no-confine."""
    archive = tmp_path / "archive"
    archive.mkdir()
    before = snapshot(archive)
    venv_bin = str(Path(".venv/bin").resolve())
    env = {**os.environ, "PATH": venv_bin}  # no /usr/bin: no bwrap
    res = run_recorder("run", "R1", "scripted:oracle", "--archive", archive, env=env, timeout=120)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: bubblewrap (bwrap) is not installed"), res.stderr
    assert "--no-confine" in lines[0]
    assert snapshot(archive) == before


def test_confine_command_refuses_without_bwrap(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(confine, "bwrap_path", lambda: None)
    with pytest.raises(ConfinementError, match="not installed"):
        confine.confine_command(["x"], sandbox=tmp_path, home=tmp_path, confine=True)
    assert confine.confine_command(["x"], sandbox=tmp_path, home=tmp_path, confine=False) == (
        ["x"],
        confine.NO_CONFINEMENT,
    )
