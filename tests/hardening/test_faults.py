"""API faults injected by the scripted model, met by the real client: every rep's exact outcome.

All cases are recorded once, concurrently (most of their time is waiting), by a module fixture;
each test then reads its case's archive. Times are printed (-s), never asserted."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
import pytest

from evalb.archive import Archive
from runner.grid import expand, plugin_hash_of, run_grid
from runner.record import RecordOptions
from runner.scripted.server import Fault, parse_fault
from tests.hardening.helpers import check_archive

pytestmark = pytest.mark.client

VARIANT, MODEL = "R1", "scripted:oracle"
RETRIES = 1  # the grid's own retries of a rep that never reached the model (so 2 attempts at most)


@dataclass
class Case:
    faults: list[Fault]
    timeout: float = 30.0
    max_api_retries: int = 6
    root: Path | None = None
    seconds: float = 0.0
    rows: list[dict] = field(default_factory=list)


CASES: dict[str, Case] = {
    # the client's own retries get past a transient 529 (2 hits), then the rep completes
    "529-transient": Case([parse_fault("status:status=529,turn=0,times=2")]),
    # 529 for ever before the first turn: the client gives up after max_api_retries, the grid retries once
    "529-persistent": Case([parse_fault("status:status=529,turn=0,times=99")], max_api_retries=1),
    # 429 with retry-after: 1 s honoured by the client, then completed
    "429-retry-after": Case([parse_fault("status:status=429,turn=0,times=1,retry_after=1")]),
    # 401 before the first turn: stopped at the client's first api_retry line, not retried
    "401-before": Case([parse_fault("status:status=401,turn=0,times=99")], timeout=60),
    # 401 after the model has spoken: stopped early too, the partial transcript kept
    "401-after": Case([parse_fault("status:status=401,turn=1,times=99")], timeout=60),
    # connection dropped right after message_start, before any content: the client makes up an
    # "API Error" assistant message; it is not the model's turn, so the rep is retried
    "drop-before": Case([parse_fault("drop:turn=0,at_frame=1,times=99")]),
    # connection dropped half way through the model's second reply
    "drop-after": Case([parse_fault("drop:turn=1,times=99")]),
    # stream stalls before the first turn: the runner's timeout, retried once
    "stall-before": Case([parse_fault("stall:turn=0,at_frame=1,times=99,stall_seconds=120")], timeout=6),
    # stream stalls after the model has spoken: the client is waiting on the API at the timeout
    "stall-after": Case([parse_fault("stall:turn=1,times=99,stall_seconds=120")], timeout=8),
}

#: name -> the exact outcome of every attempt, in order, and whether the model had spoken
EXPECTED: dict[str, list[tuple[str, bool]]] = {
    "529-transient": [("completed", True)],
    "529-persistent": [("client_error", False), ("client_error", False)],
    "429-retry-after": [("completed", True)],
    "401-before": [("client_error", False)],
    "401-after": [("client_error", True)],
    "drop-before": [("client_error", False), ("client_error", False)],
    "drop-after": [("client_error", True)],
    "stall-before": [("timeout", False), ("timeout", False)],
    "stall-after": [("client_error", True)],
}


def _record(name: str, case: Case, base: Path) -> Case:
    case.root = base / name / "archive"
    opts = RecordOptions(
        faults=case.faults,
        timeout=case.timeout,
        max_api_retries=case.max_api_retries,
        workdir=None,
    )
    slots = expand([VARIANT], [MODEL], 1, plugin_hash_of(opts.plugin_dir))
    t0 = time.monotonic()
    run_grid(slots, Archive(case.root), opts, jobs=1, retries=RETRIES, backoff=0.2, progress_stream=None)
    case.seconds = time.monotonic() - t0
    return case


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Case]:
    base = tmp_path_factory.mktemp("faults")
    with ThreadPoolExecutor(max_workers=3) as pool:
        done = dict(zip(CASES, pool.map(lambda kv: _record(*kv, base), CASES.items()), strict=True))
    for name, case in done.items():
        assert case.root is not None
        df = pl.read_parquet(str(case.root / "runs" / "*.parquet")).sort("attempt")
        print(
            f"fault {name:16s} {case.seconds:5.1f}s  "
            + "; ".join(
                f"{r['outcome']} {r['duration_ms']}ms retries={r['api_retries']}"
                for r in df.iter_rows(named=True)
            )
        )
    return done


def _runs(case: Case) -> pl.DataFrame:
    assert case.root is not None
    return check_archive(case.root).sort("attempt")


@pytest.mark.parametrize("name", list(CASES))
def test_each_fault_gives_its_exact_outcomes(recorded: dict[str, Case], name: str) -> None:
    """Counted per case: faults injected (served by the model), reps recorded, none lost, none twice."""
    df = _runs(recorded[name])
    got = list(zip(df["outcome"], df["reached_model"], strict=True))
    assert got == EXPECTED[name], df.select("attempt", "outcome", "outcome_detail").rows()
    assert df["attempt"].to_list() == list(range(1, len(got) + 1))
    assert df["slot"].n_unique() == 1  # one slot, every attempt kept: nothing lost, nothing duplicated
    served = [json.loads(o)["faults_served"] for o in df["options_json"]]
    assert all(n >= 1 for n in served), f"fault not injected: {served}"
    assert (df["hook_seen"]).all()


def test_client_retries_are_recorded(recorded: dict[str, Case]) -> None:
    """The client's api_retry lines are counted on the run: 2 for two 529s, 1 for one 429."""
    assert _runs(recorded["529-transient"])["api_retries"].to_list() == [2]
    assert _runs(recorded["429-retry-after"])["api_retries"].to_list() == [1]
    assert _runs(recorded["529-persistent"])["api_retries"].to_list() == [1, 1]


def test_401_stops_early_instead_of_waiting_out_the_timeout(recorded: dict[str, Case]) -> None:
    """A 401 is hopeless: the rep ends at the client's first api_retry line, well inside its 60 s."""
    for name in ("401-before", "401-after"):
        df = _runs(recorded[name])
        # ended by the runner on the client's first retry line, not by the rep's 60 s timeout (the
        # duration is printed by the fixture, not asserted)
        assert df["outcome"][0] == "client_error", (name, df["outcome"][0], df["duration_ms"][0])
        assert "401" in df["outcome_detail"][0] and "retrying cannot help" in df["outcome_detail"][0]


def test_partial_transcripts_are_kept_after_the_model_spoke(recorded: dict[str, Case]) -> None:
    """After the model has spoken, the rep keeps what it said: the first turn's tool call and result."""
    for name in ("401-after", "drop-after", "stall-after"):
        case = recorded[name]
        assert case.root is not None
        ev = pl.read_parquet(str(case.root / "events" / "*.parquet"))
        assert ev.filter(pl.col("block_type") == "tool_use").height >= 1, name
        assert ev.filter(pl.col("block_type") == "tool_result").height >= 1, name
        assert _runs(case)["n_lines"][0] == ev["seq"].n_unique()


def test_cut_and_stalled_streams_are_named(recorded: dict[str, Case]) -> None:
    assert "stalled" in _runs(recorded["stall-after"])["outcome_detail"][0]
    assert "before the model's first turn" in _runs(recorded["stall-before"])["outcome_detail"][0]
    assert "malformed response" in _runs(recorded["drop-before"])["outcome_detail"][0]


def test_no_fault_is_scored_as_a_model_fail(recorded: dict[str, Case]) -> None:
    """The checker gives INVALID (never FAIL) to every rep that an API fault spoiled."""
    from analysis.checker import score_archive

    verdicts = {}
    for name, case in recorded.items():
        scores = score_archive(case.root, write=False)  # type: ignore[arg-type]
        out = dict(zip(scores.scores["run_id"], scores.scores["verdict"], strict=True))
        df = _runs(case)
        for run_id, outcome in zip(df["run_id"], df["outcome"], strict=True):
            if outcome != "completed":
                verdicts[f"{name}/{run_id[:6]}"] = out[run_id]
    assert verdicts and all(v == "INVALID" for v in verdicts.values()), verdicts
