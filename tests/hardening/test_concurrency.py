"""Two recorder processes writing into one archive at once, on overlapping grids, each with --jobs 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hardening.helpers import assert_grid_complete, check_archive, recorder, slot_keys, wait_no_procs

pytestmark = pytest.mark.client

MODEL = "scripted:oracle"


def test_two_recorders_on_overlapping_grids(tmp_path: Path) -> None:
    """A: R1,R2,R3 × 2 reps; B: R2,R3,W1 × 2 reps, started together: 8 distinct slots, each recorded
    exactly once (4 are claimed by whichever recorder gets there first), no file corrupted."""
    root, work = tmp_path / "archive", tmp_path / "work"
    work.mkdir()
    a = recorder("run", "R1,R2,R3", MODEL, "--reps", 2, "--jobs", 2, "--archive", root, "--workdir", work)
    b = recorder("run", "R2,R3,W1", MODEL, "--reps", 2, "--jobs", 2, "--archive", root, "--workdir", work)
    out_a, out_b = a.communicate(timeout=400)[1], b.communicate(timeout=400)[1]
    assert a.returncode == 0 and b.returncode == 0, (out_a, out_b)
    df = check_archive(root)
    slots = slot_keys(["R1", "R2", "R3"], MODEL, 2) | slot_keys(["R2", "R3", "W1"], MODEL, 2)
    assert len(slots) == 8
    counts = assert_grid_complete(df, slots)
    assert counts == {"completed": 8} and df.height == 8
    # each recorder says how many it recorded; together exactly the 8 slots
    recorded = [int(s.split("recorded ")[1].split(" ")[0]) for s in (out_a, out_b)]
    assert sum(recorded) == 8, (out_a, out_b)
    assert wait_no_procs(str(work)) == []
