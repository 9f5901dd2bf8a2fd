"""Shared fixtures: archives recorded with the real Claude Code client against the scripted model.

They are session-scoped (recording takes tens of seconds) and built lazily, only for the tests
that ask for them. Tests must treat them as read-only: copy one (`copy_archive`) to change it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

# The adversarial test policies (scripted:escape, scripted:shell) run only where this is set; the
# recorders the tests start as subprocesses inherit it.
os.environ["EVALB_TEST_POLICIES"] = "1"

from evalb.archive import Archive
from runner.grid import GridReport, expand, plugin_hash_of, run_grid
from runner.record import RecordOptions

GOLDEN = Path(__file__).parent / "runner" / "golden"


def record_grid(
    archive: Path, scenarios: list[str], models: list[str], reps: int, *, jobs: int = 2, **options: object
) -> GridReport:
    """Record a grid with the real client (the test-suite twin of `evalb-record run`)."""
    opts = RecordOptions(**options)  # type: ignore[arg-type]
    slots = expand(scenarios, models, reps, plugin_hash_of(opts.plugin_dir))
    return run_grid(slots, Archive(archive), opts, jobs=jobs, progress_stream=None)


@pytest.fixture(scope="session")
def demo_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """All 8 variants × scripted:oracle × 2 reps, plus × scripted:oblivious × 1 rep (24 reps)."""
    root = tmp_path_factory.mktemp("demo") / "archive"
    record_grid(root, ["all"], ["scripted:oracle"], 2)
    record_grid(root, ["all"], ["scripted:oblivious"], 1)
    return root


SCRIPTED_JUDGE = str(Path(__file__).resolve().parents[1] / ".venv" / "bin" / "evalb-scripted-judge")


def score(root: Path) -> None:
    """Score an archive the way `evalb-score` does, with the scripted judge (through the real client)."""
    from analysis.checker import score_archive
    from analysis.judge import CommandJudge

    score_archive(root, judge=CommandJudge(SCRIPTED_JUDGE))


@pytest.fixture(scope="session")
def stochastic_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """All 8 variants × scripted:stochastic × 3 reps plus × scripted:oracle × 1, recorded and scored:
    real variance, for the statistics, notebooks and report."""
    root = tmp_path_factory.mktemp("stochastic") / "archive"
    record_grid(root, ["all"], ["scripted:stochastic"], 3)
    record_grid(root, ["all"], ["scripted:oracle"], 1)
    score(root)
    return root


@pytest.fixture
def copy_archive(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Copy a session archive so a test may change it."""

    def copy(src: Path) -> Path:
        dest = tmp_path / "archive-copy"
        shutil.copytree(src, dest)
        return dest

    return copy
