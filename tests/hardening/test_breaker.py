"""The grid's circuit breaker: reps that keep failing the same way before the model speaks stop the
grid (a real model with no network would otherwise take ~55 s × 3 attempts per rep for hours)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from evalb.archive import Archive
from evalb.scenarios import all_variant_ids
from evalb.schema import RunRecord
from runner.grid import Breaker, GridReport, Progress, expand, failure_key, plugin_hash_of, run_grid
from runner.record import RecordOptions
from runner.scripted.server import parse_fault
from tests.hardening.helpers import check_archive

UNAUTHORISED = "status:status=401,turn=any,times=1000"


def _run(outcome: str, detail: str, reached: bool = False) -> RunRecord:
    return RunRecord.model_construct(outcome=outcome, outcome_detail=detail, reached_model=reached)


def test_same_failure_counts_up_to_the_limit() -> None:
    b = Breaker(3)
    assert not b.add(_run("client_error", "API Error: 401 request_id req_01ABCdef123 after 4.2 s"))
    assert not b.add(_run("client_error", "API Error: 401 request_id req_01XYZuvw987 after 5.9 s"))
    assert b.add(_run("client_error", "API Error: 401 request_id req_01QQQqqq555 after 3.1 s"))
    assert b.tripped and b.reason is not None and "401" in b.reason and "3 reps in a row" in b.reason
    assert not b.add(_run("client_error", "API Error: 401"))  # trips once


def test_a_rep_that_reaches_the_model_or_fails_otherwise_resets_the_count() -> None:
    b = Breaker(2)
    assert not b.add(_run("client_error", "API Error: 401"))
    assert not b.add(_run("completed", "", reached=True))
    assert not b.add(_run("client_error", "API Error: 401"))
    assert not b.add(_run("timeout", "no output for 30 s"))
    assert not b.add(_run("client_error", "API Error: 401"))
    assert not b.add(_run("client_error", "API Error: 401", reached=True))  # the model spoke
    assert not b.tripped
    assert failure_key(_run("client_error", "x", reached=True)) is None
    assert failure_key(_run("completed", "")) is None


def test_zero_turns_the_breaker_off() -> None:
    b = Breaker(0)
    assert not any(b.add(_run("client_error", "API Error: 401")) for _ in range(20))
    assert not b.tripped


def _grid(root: Path, variants: list[str], breaker: int, stream: io.StringIO) -> GridReport:
    opts = RecordOptions(faults=[parse_fault(UNAUTHORISED)], timeout=60, workdir=None)
    slots = expand(variants, ["scripted:oracle"], 1, plugin_hash_of(opts.plugin_dir))
    return run_grid(slots, Archive(root), opts, jobs=1, backoff=0.2, progress_stream=stream, breaker=breaker)


@pytest.mark.client
def test_grid_stops_after_k_reps_failing_alike(tmp_path: Path) -> None:
    """Every rep gets a 401 from the API: after 3 the grid stops; those 3 are recorded, the rest
    are not started, and the reason (the 401) is on the report and on every progress line."""
    variants = all_variant_ids()
    assert len(variants) > 3
    stream = io.StringIO()
    report = _grid(tmp_path / "archive", ["all"], 3, stream)
    assert report.stopped_by_breaker is not None
    assert "client_error" in report.stopped_by_breaker and "401" in report.stopped_by_breaker
    assert report.not_started == len(variants) - 3
    df = check_archive(tmp_path / "archive")
    assert df.height == 3 and len(report.recorded) == 3
    assert set(df["outcome"]) == {"client_error"} and not df["reached_model"].any()
    assert len(Archive(tmp_path / "archive").committed_slots()) == 3
    lines = stream.getvalue().splitlines()
    progress = [ln for ln in lines if ln.startswith("[")]
    assert len(progress) == 3 and all("client_error" in ln and "401" in ln for ln in progress), lines
    assert any("circuit breaker" in ln and "401" in ln for ln in lines), lines


@pytest.mark.client
def test_breaker_off_records_every_rep(tmp_path: Path) -> None:
    variants = all_variant_ids()[:2]
    report = _grid(tmp_path / "archive", variants, 0, io.StringIO())
    assert report.stopped_by_breaker is None and report.not_started == 0
    assert check_archive(tmp_path / "archive").height == 2


def test_progress_line_says_why_a_rep_did_not_complete() -> None:
    stream = io.StringIO()
    progress = Progress(2, stream)
    detail = "API Error: 401 " + "x" * 300
    progress.update(
        RunRecord.model_construct(
            variant="R1", model_alias="m", rep=0, outcome="client_error", outcome_detail=detail
        ),
        None,
    )
    progress.update(
        RunRecord.model_construct(
            variant="R2", model_alias="m", rep=0, outcome="completed", outcome_detail="ok"
        ),
        "PASS",
    )
    first, second = stream.getvalue().splitlines()
    assert "R1 m rep 0: client_error (API Error: 401 x" in first and first.endswith("…)")
    assert len(first) < 200
    assert second.endswith("R2 m rep 0: completed PASS")


@pytest.mark.client
def test_the_cli_stops_by_the_breaker_with_one_line_and_exit_3(tmp_path: Path) -> None:
    """`evalb-record run all … --breaker 2` with a 401 on every rep: two reps recorded, one `error:`
    line naming the breaker and the 401, exit 3 (a harness stop, docs/cli.md)."""
    from tests.hardening.helpers import run_recorder

    root = tmp_path / "archive"
    res = run_recorder(
        "run", "all", "scripted:oracle", "--archive", root, "--breaker", "2", "--inject-fault", UNAUTHORISED
    )
    assert res.returncode == 3, res.stderr
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and "2 reps in a row" in errors[0] and "401" in errors[0], res.stderr
    assert check_archive(root).height == 2
    bad = run_recorder("run", "R1", "scripted:oracle", "--archive", root, "--breaker", "-1")
    assert bad.returncode == 2 and bad.stderr.startswith("error: --breaker -1 is negative")
