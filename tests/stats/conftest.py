"""Fixtures for the variance-library tests: simulated score frames and a small simulated archive."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from analysis.frames import check_columns
from analysis.simulate import simulate_scores, write_archive


@pytest.fixture
def scores() -> pl.DataFrame:
    """Both models on all 8 variants, 4 reps each, 10% invalid runs."""
    return check_columns(simulate_scores(reps=4, seed=3, invalid_rate=0.1))


@pytest.fixture(scope="session")
def small_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A simulated archive on disk (runs, events, scores) with two plugin variants."""
    root = tmp_path_factory.mktemp("archive")
    write_archive(root, simulate_scores(reps=3, seed=11, invalid_rate=0.1, plugin_hash="plugA"))
    write_archive(root, simulate_scores(reps=3, seed=12, invalid_rate=0.1, plugin_hash="plugB"))
    return root
