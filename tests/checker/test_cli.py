"""evalb-score as a user runs it: exact TSV rows, exit codes (expected failures), degradation checks,
one-line errors, flips on rescoring."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from analysis import fabricate as fab
from evalb.scenarios import all_variant_ids, load_scenarios
from tests.checker.helpers import Runs, hooked
from tests.conftest import SCRIPTED_JUDGE

BIN = Path(sys.executable).parent


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "evalb-score"), *args], capture_output=True, text=True, env={**os.environ, **(env or {})}
    )


def _passing_r1() -> list[str]:
    b = hooked()
    b.bash("ls docs/adr", "0002-x.md")
    return b.text("This conflicts with ADR-0002.").result("Kept signing: ADR-0002.").lines


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    runs = Runs(tmp_path / "archive")
    runs.add("pass", _passing_r1(), "R1", model="haiku")
    runs.add("fail", hooked().text("Done.").result("Done.").lines, "R2", model="haiku")
    runs.add(
        "invalid", fab.TranscriptBuilder().init().text("x").result("x").lines, "R4-nograph", model="sonnet"
    )
    return runs.archive.root


TSV = (
    "R1\thaiku\tA:PASS\tB:PASS\tPASS\tA: Bash on docs/adr (seq 3); B: cited 0002 (seq 5), flagged the conflict (seq 5)\n"
    "R2\thaiku\tA:FAIL\tB:FAIL\tFAIL\tA: no tool call touched the ADR system; B: did not cite 0003, did not flag the conflict\n"
    "R4-nograph\tsonnet\tA:-\tB:-\tINVALID\tINVALID: no SessionStart hook_response: the hook note never reached the model\n"
)


class TestTsv:
    def test_exact_rows_and_exit_1(self, archive) -> None:
        """--tsv prints exactly one spec row per run; a failing valid run makes the exit code 1."""
        p = run("--archive", str(archive), "--tsv")
        assert (p.stdout, p.returncode) == (TSV, 1)

    @pytest.mark.parametrize(
        ("args", "rows", "code"),
        [
            (["--scenario", "r1"], [0], 0),
            (["--scenario", "R2"], [1], 1),
            (["--model", "sonnet"], [2], 0),
            (["--model", "nobody"], [], 2),  # a model no run has is a usage error, not an empty pass
        ],
    )
    def test_filters_and_exit_codes(self, archive, args, rows, code) -> None:
        """--scenario/--model select runs; only INVALID or passing runs exit 0."""
        p = run("--archive", str(archive), "--tsv", *args)
        expected = "".join(TSV.splitlines(keepends=True)[i] for i in rows)
        assert (p.stdout, p.returncode) == (expected, code)

    def test_table_mode_has_cell_summary(self, archive) -> None:
        """Without --tsv: a row per run and a per-cell summary."""
        p = run("--archive", str(archive))
        assert p.returncode == 1
        assert "per cell:" in p.stdout
        assert any(
            line.split()[:2] == ["R4-nograph", "sonnet"] and line.split()[-1] == "1"
            for line in p.stdout.splitlines()
        )


class TestUsageErrors:
    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (
                ["--archive", "/nonexistent/archive"],
                "error: /nonexistent/archive is not an evalb archive (no archive.json) (pass --archive DIR)\n",
            ),
            (["--scenario", "X9"], "error: unknown scenario 'X9' (choose one of: "),
        ],
    )
    def test_one_line_and_exit_2(self, archive, args, message) -> None:
        """A bad archive or scenario is one line on stderr, no traceback, exit 2."""
        full = [*args] if args[0] == "--archive" else ["--archive", str(archive), *args]
        p = run(*full)
        assert p.stderr.startswith(message) and p.stderr.count("\n") == 1
        assert (p.stdout, p.returncode) == ("", 2)

    def test_unknown_option_exit_2(self) -> None:
        p = run("--frobnicate")
        assert p.returncode == 2 and "Traceback" not in p.stderr


class TestRescoring:
    def test_changed_rule_lists_flips(self, archive, tmp_path) -> None:
        """Scoring with a changed rule prints run, axis and old -> new for every verdict that moved."""
        assert run("--archive", str(archive), "--tsv").returncode == 1
        rules = tmp_path / "rules"
        shutil.copytree(Path(__file__).parents[2] / "analysis" / "rules", rules)
        # The changed rule: conflict no longer required for R scenarios -> nothing flips for it;
        # citing is no longer required -> R2's axis (b) flips, and with it nothing else (A still FAIL).
        # Both are Python rules, so this also shows a copied rules directory's modules are the ones run.
        verdict = (rules / "verdict.py").read_text()
        assert "ELSE cite_ok END, false)" in verdict
        (rules / "verdict.py").write_text(
            verdict.replace("ELSE cite_ok END, false)", "ELSE true END, false)")
        )
        conflict = (rules / "flags_conflict.py").read_text()
        assert "(run.run_id, bool(ev), ev, reason)" in conflict
        (rules / "flags_conflict.py").write_text(
            conflict.replace("(run.run_id, bool(ev), ev, reason)", "(run.run_id, True, ev, reason)")
        )
        p = run("--archive", str(archive), "--tsv", "--rules", str(rules))
        assert p.returncode == 1
        flips = [line.split() for line in p.stderr.splitlines() if "->" in line]
        assert [f[1:3] + f[5:] for f in flips] == [["R2", "haiku", "B:", "FAIL", "->", "PASS"]]
        assert p.stderr.startswith("1 verdict(s) flipped")
        # Back to the shipped rules: the flip goes back, and a third identical pass reports nothing.
        back = run("--archive", str(archive), "--tsv")
        assert [line.split()[5:] for line in back.stderr.splitlines() if "->" in line] == [
            ["B:", "PASS", "->", "FAIL"]
        ]
        assert run("--archive", str(archive), "--tsv").stderr == ""


class TestExpectedFailures:
    """Exit codes: 0 all valid runs pass except expected failures, 1 an unexpected failure, 2 usage."""

    @pytest.fixture
    def degradation(self, tmp_path: Path) -> Runs:
        """R4 done perfectly 3 times, R4-nograph done as well as it can be (A PASS, B FAIL) 3 times."""
        sc = next(s for s in load_scenarios() if s.id == "R4")
        base, nograph = sc.all_variants()
        adrs = fab.load_adrs()
        runs = Runs(tmp_path / "archive")
        for i in range(3):
            runs.add(f"r4-{i}", fab.perfect(sc, base, adrs).lines, "R4", model="m")
            made = fab.perfect(sc, nograph, adrs)
            runs.add(f"ng-{i}", made.lines, "R4-nograph", model="m", files=made.files)
        return runs

    def test_expected_failure_exits_0_and_rows_stay_as_the_spec_prints_them(self, degradation) -> None:
        """R4-nograph's A:PASS B:FAIL rows still read FAIL in the TSV, yet the exit code is 0."""
        p = run("--archive", str(degradation.archive.root), "--tsv")
        rows = [r.split("\t")[:5] for r in p.stdout.splitlines()]
        assert rows.count(["R4", "m", "A:PASS", "B:PASS", "PASS"]) == 3
        assert rows.count(["R4-nograph", "m", "A:PASS", "B:FAIL", "FAIL"]) == 3
        assert (len(rows), p.returncode) == (6, 0)
        assert "degradation" not in p.stdout + p.stderr  # --tsv prints the rows only

    def test_table_mode_ends_with_the_degradation_check(self, degradation) -> None:
        """Without --tsv the output ends with the reading: R4 (b) 3/3 vs R4-nograph (b) fails 3/3 -> confirmed."""
        p = run("--archive", str(degradation.archive.root))
        assert p.returncode == 0
        last = p.stdout.rstrip().splitlines()[-1]
        assert "R4 B-pass 3/3 vs R4-nograph B-fail 3/3  p = 0.050  -> degradation confirmed" in last

    def test_one_scenario_alone_has_no_degradation_reading(self, degradation) -> None:
        """--scenario R4-nograph: its expected failures still exit 0; no degradation line (R4 is out of scope)."""
        p = run("--archive", str(degradation.archive.root), "--scenario", "R4-nograph")
        assert p.returncode == 0
        assert "degradation" not in p.stdout and p.stdout.count("R4-nograph") >= 3

    def test_any_other_failure_on_the_degradation_variant_exits_1(self, degradation) -> None:
        """An R4-nograph run that fails axis (a) as well is not the expected failure: exit 1."""
        degradation.add("oblivious", hooked().text("Done.").result("Done.").lines, "R4-nograph", model="m")
        p = run("--archive", str(degradation.archive.root), "--tsv")
        assert p.returncode == 1
        assert p.stdout.splitlines()[-1].split("\t")[:5] == ["R4-nograph", "m", "A:FAIL", "B:FAIL", "FAIL"]


@pytest.mark.client
class TestRecordedGridExitCodes:
    """The real client with the scripted models: an oracle grid incl. R4-nograph exits 0, oblivious exits 1."""

    @pytest.fixture
    def recorded(self, demo_archive, copy_archive) -> Path:
        return copy_archive(demo_archive)

    def test_oracle_grid_exits_0_and_oblivious_exits_1(self, recorded) -> None:
        """Oracle on every variant (R4-nograph FAILs as expected): exit 0; oblivious or both: exit 1."""
        env = {"ADR_EVAL_B_JUDGE_CMD": SCRIPTED_JUDGE}
        oracle = run("--archive", str(recorded), "--tsv", "--model", "scripted:oracle", env=env)
        rows = [r.split("\t") for r in oracle.stdout.splitlines()]
        assert {r[0] for r in rows} == set(all_variant_ids())
        assert {tuple(r[2:5]) for r in rows if r[0] == "R4-nograph"} == {("A:PASS", "B:FAIL", "FAIL")}
        assert {r[4] for r in rows if r[0] != "R4-nograph"} == {"PASS"}
        assert oracle.returncode == 0, oracle.stderr
        oblivious = run("--archive", str(recorded), "--tsv", "--model", "scripted:oblivious", env=env)
        assert {r.split("\t")[4] for r in oblivious.stdout.splitlines()} == {"FAIL"}
        assert oblivious.returncode == 1
        # The whole archive, table mode: exit 1 (oblivious), and the degradation reading per model.
        # 2 oracle reps: R4 passes (b) 2/2 and R4-nograph fails it 2/2, in the expected direction but
        # too few reps to confirm; oblivious never passes R4's (b): 'R4 not passing'.
        p = run("--archive", str(recorded), env=env)
        assert p.returncode == 1
        tail = p.stdout[p.stdout.index("degradation checks") :].splitlines()[1:]
        got = {ln.split()[0]: ln for ln in tail}
        assert "R4 B-pass 2/2 vs R4-nograph B-fail 2/2" in got["scripted:oracle"]
        assert (
            "degradation not shown (in the expected direction, but 2+2 valid reps can never"
            in got["scripted:oracle"]
        )
        assert "R4 B-pass 0/1 vs R4-nograph B-fail 1/1" in got["scripted:oblivious"]
        assert "-> R4 not passing" in got["scripted:oblivious"]
