"""evalb-score as a user runs it: exact TSV rows, exit codes, one-line errors, flips on rescoring."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from analysis import fabricate as fab
from tests.checker.helpers import Runs, hooked

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
            (["--model", "nobody"], [], 0),
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
