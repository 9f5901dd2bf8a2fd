"""runner.budget without the client: the grid budget's arithmetic over real run rows (fabricated
transcripts parsed and committed as the recorder does), the dry-run plan, the test-price gate and
the option refusals."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import pytest

from analysis.fabricate import archive_transcript
from evalb.archive import Archive
from evalb.errors import PolicyError
from evalb.schema import RunRecord
from runner.budget import TEST_PRICE_ENV, Budget, past_runs, plan, scripted_priced
from runner.grid import expand, plugin_hash_of
from runner.record import RecordOptions

EXE = str(Path(".venv/bin/evalb-record").resolve())


def _lines(cost: float | None, ms: int = 2000, subtype: str = "success") -> list[str]:
    lines = [
        json.dumps(
            {
                "type": "assistant",
                "message": {
                    "id": "m1",
                    "role": "assistant",
                    "model": "claude-x",
                    "content": [{"type": "text", "text": "hi"}],
                },
            }
        )
    ]
    result = {"type": "result", "subtype": subtype, "is_error": subtype != "success", "duration_ms": ms}
    result |= {"num_turns": 1, "result": "done", "stop_reason": "end_turn"}
    if cost is not None:
        result["total_cost_usd"] = cost
    return [*lines, json.dumps(result)]


def _commit(
    archive: Archive, model: str, cost: float | None, rep: int, outcome: str = "completed"
) -> RunRecord:
    run_id = archive_transcript(
        archive, _lines(cost), variant="R1", scenario="R1", model_alias=model, rep=rep, outcome=outcome
    )
    row = archive.read("runs").filter(run_id=run_id).to_dicts()[0]
    return RunRecord.model_validate(row)


@pytest.fixture
def arch(tmp_path: Path) -> Archive:
    a = Archive(tmp_path / "a")
    a.ensure()
    return a


def test_past_runs_are_medians_of_completed_runs(arch: Archive) -> None:
    for i, c in enumerate([0.1, 0.3, 0.2]):
        _commit(arch, "haiku", c, i)
    _commit(arch, "haiku", 0.25, 3, outcome="turn_limit")  # a rep the client's limit ended: a rep
    _commit(arch, "haiku", 9.0, 4, outcome="client_error")  # not a rep that ran to its end: no basis
    past = past_runs(arch)
    assert past["haiku"].cost() == pytest.approx(0.225)
    assert past["haiku"].duration_s() == pytest.approx(2.0)
    assert past_runs(Archive(arch.root.parent / "none")) == {}
    assert not (arch.root.parent / "none").exists()


def test_budget_stops_before_the_spend_would_pass_it(arch: Archive) -> None:
    runs = [_commit(arch, "haiku", 0.4, i) for i in range(3)]
    b = Budget(1.0, {}, priced=False)
    assert b.admit("s0", "haiku")  # no basis yet: projected 0
    b.charge(runs[0])
    b.release("s0")
    assert b.projected("haiku") == pytest.approx(0.4)
    assert b.admit("s1", "haiku")  # 0.4 spent + 0.4 next = 0.8 <= 1
    # 0.4 spent + 0.4 running + 0.4 next = 1.2 > 1: stops, and stays stopped for every later slot
    assert not b.admit("s2", "haiku")
    assert b.stopped is not None and "would pass $1" in b.stopped and "1 rep(s) running" in b.stopped
    b.charge(runs[1])
    b.release("s1")
    assert not b.admit("s3", "haiku")
    assert b.not_started == 2
    assert b.spent == pytest.approx(0.8)


def test_scripted_reps_cost_nothing_unless_the_test_price(arch: Archive) -> None:
    run = _commit(arch, "scripted:oracle", 0.5, 0)
    free = Budget(0.1, {}, priced=False)
    free.charge(run)
    assert free.spent == 0 and free.admit("s", "scripted:oracle")
    priced = Budget(0.1, {}, priced=True)
    priced.charge(run)
    assert priced.spent == pytest.approx(0.5) and not priced.admit("s", "scripted:oracle")


def test_a_rep_killed_without_a_cost_is_charged_the_projection(arch: Archive) -> None:
    _commit(arch, "haiku", 0.3, 0)
    killed = _commit(arch, "haiku", None, 1, outcome="crashed")
    b = Budget(5.0, past_runs(arch))
    b.charge(killed)
    assert b.spent == pytest.approx(0.3)


def test_with_no_basis_a_charged_model_runs_one_rep_at_a_time(arch: Archive) -> None:
    """The first rep of a model with no cost known yet is a probe: a second waits for its cost."""
    run = _commit(arch, "haiku", 0.6, 0)
    b = Budget(1.0, {})
    assert b.admit("s0", "haiku")
    answer: list[bool] = []
    t = threading.Thread(target=lambda: answer.append(b.admit("s1", "haiku")))
    t.start()
    time.sleep(0.3)
    assert t.is_alive() and not answer  # waiting: admitting it blind could pass the budget
    b.charge(run)
    b.release("s0")
    t.join(timeout=5)
    assert answer == [False]  # 0.6 spent + 0.6 projected > 1
    assert b.admit("s2", "scripted:oracle") is False  # stopped is stopped, whatever the model


def test_test_price_is_refused_outside_the_test_suite(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TEST_PRICE_ENV, "1")
    assert scripted_priced()
    monkeypatch.delenv("EVALB_TEST_POLICIES")
    with pytest.raises(PolicyError, match="test-only price"):
        scripted_priced()
    monkeypatch.delenv(TEST_PRICE_ENV)
    assert not scripted_priced()


def test_plan_lists_slots_in_order_and_says_no_basis(tmp_path: Path) -> None:
    slots = expand(["R1", "W1"], ["scripted:oracle", "haiku"], 2, plugin_hash_of(RecordOptions().plugin_dir))
    text = plan(slots, Archive(tmp_path / "none"), jobs=2)
    assert not (tmp_path / "none").exists()
    lines = text.splitlines()
    assert lines[0].startswith("plan: 8 slots (4 cells × up to 2 reps; models: scripted:oracle, haiku)")
    assert lines[1] == "0 already recorded, 8 to record, in this order:"
    assert lines[2:10] == [f"  {i}. {s.variant} {s.model} rep {s.rep}" for i, s in enumerate(slots, 1)]
    assert "scripted:oracle: 4 reps × $0 (scripted), time: no basis" in lines
    assert "haiku: 4 reps × cost: no basis, time: no basis" in lines
    assert "projected cost: no basis for haiku (no completed run of it in the archive)" in lines


@pytest.mark.parametrize(
    ("args", "what"),
    [
        (["--budget-usd", "0"], "--budget-usd 0 must be a number more than 0"),
        (["--budget-usd", "nan"], "--budget-usd nan must be a number more than 0"),
        (["--max-turns", "0"], "--max-turns 0 must be a number more than 0"),
        (["--max-budget-usd", "-1"], "--max-budget-usd -1 must be a number more than 0"),
    ],
)
def test_bad_budget_options_are_one_line_exit_2(tmp_path: Path, args: list[str], what: str) -> None:
    res = subprocess.run(
        [EXE, "run", "R1", "scripted:oracle", "--archive", str(tmp_path / "a"), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2, res.stderr
    assert res.stderr.splitlines() == [res.stderr.strip()] and res.stderr.startswith(f"error: {what}")
    assert not (tmp_path / "a").exists()
