"""Shared fixtures: archives recorded with the real Claude Code client against the scripted model.

They are session-scoped (recording takes tens of seconds) and built lazily, only for the tests
that ask for them. Tests must treat them as read-only: copy one (`copy_archive`) to change it.

Every test that records with the real client is marked `client`, so `-m "not client"` is fast:
tests using `demo_archive` or `stochastic_archive` are marked here at collection, and
`record_grid` (which those fixtures and other tests record with) refuses to run for a test
without the mark, so a missing mark fails instead of slowing the fast run down.
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

#: Session fixtures that record with the real client: their users are marked `client`.
CLIENT_FIXTURES = {"demo_archive", "stochastic_archive"}
_running: list[pytest.Item] = []  # the test being set up or run


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        callspec = getattr(item, "callspec", None)
        if callspec is not None:  # a fixture named by a parameter (request.getfixturevalue)
            names |= {v for v in callspec.params.values() if isinstance(v, str)}
        if names & CLIENT_FIXTURES:
            item.add_marker(pytest.mark.client)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _running[:] = [item]


def require_client_mark() -> None:
    """Refuse to drive the real client from a test not marked `client` (it would slow `-m "not client"`)."""
    if _running and _running[0].get_closest_marker("client") is None:
        raise RuntimeError(f"{_running[0].nodeid} records with the real client: mark it @pytest.mark.client")


def record_grid(
    archive: Path, scenarios: list[str], models: list[str], reps: int, *, jobs: int = 2, **options: object
) -> GridReport:
    """Record a grid with the real client (the test-suite twin of `evalb-record run`)."""
    require_client_mark()
    opts = RecordOptions(**options)  # type: ignore[arg-type]
    slots = expand(scenarios, models, reps, plugin_hash_of(opts.plugin_dir))
    return run_grid(slots, Archive(archive), opts, jobs=jobs, progress_stream=None)


@pytest.fixture(scope="session")
def demo_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """All 11 variants × scripted:oracle × 2 reps, plus × scripted:oblivious × 1 rep (33 reps)."""
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
    """All 11 variants × scripted:stochastic × 3 reps plus × scripted:oracle × 1, recorded and scored:
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
