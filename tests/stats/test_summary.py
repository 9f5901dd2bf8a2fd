"""The per-cell summary (pass^k, degradation checks) and the report on archives with no valid run at all."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest
from scipy import stats as sps

from analysis.checker import score_archive
from analysis.degradation import (
    BASE_NOT_PASSING,
    CONFIRMED,
    NOT_SHOWN,
    classify,
    expected_fail_variants,
    expected_failure,
    unexpected_failures,
)
from analysis.frames import load_scores
from analysis.report import build_report
from analysis.simulate import simulate_scores, write_archive
from analysis.stats import cell_table
from analysis.summary import summary_text
from evalb.archive import Archive
from runner.importer import import_transcript
from tests.conftest import GOLDEN


def _all_invalid(tmp_path: Path) -> Path:
    root = tmp_path / "a"
    import_transcript(GOLDEN / "killed-mid-line.jsonl", Archive(root), scenario="R1", model="haiku")
    score_archive(root)
    return root


def test_summary_says_no_data_instead_of_inventing_rates(tmp_path: Path) -> None:
    text = summary_text(_all_invalid(tmp_path))
    assert "0/0     - [   -,    -]" in text and "no-data" in text
    assert "1 invalid run excluded from every rate" in text


def test_report_builds_with_no_valid_run(tmp_path: Path) -> None:
    root = _all_invalid(tmp_path)
    out = tmp_path / "r.html"
    build_report(root, out)
    html = out.read_text()
    assert "INVALID" in html and "crashed" in html


# --- degradation checks and pass^k in the summary ---------------------------------------------------
def _sim_archive(tmp_path: Path) -> Path:
    rates = {("R4", "sonnet"): 1.0, ("R4-nograph", "sonnet"): 0.0, ("R4", "haiku"): 0.0}
    rates |= {("R4-nograph", "haiku"): 0.0, ("R1", "sonnet"): 0.6, ("R1", "haiku"): 0.3}
    axis_a = {k: 1.0 for k in rates}  # axis (a) always passes: axis (b) then passes at the cell's rate
    root = tmp_path / "sim"
    write_archive(root, simulate_scores(rates, reps=4, seed=5, axis_a_rates=axis_a))
    return root


def test_summary_reads_degradation_as_the_spec_does(tmp_path: Path) -> None:
    """Per model: R4's (b) passes vs R4-nograph's (b) fails, Fisher's one-sided p, and the verdict:
    confirmed where R4 always passes (b) and R4-nograph never does (4/4 vs 4/4: p = 1/70), and
    'R4 not passing' where R4 never passed (b), whatever R4-nograph did."""
    text = summary_text(_sim_archive(tmp_path))
    lines = {ln.split()[0]: ln for ln in text.splitlines() if "B-pass" in ln}
    assert set(lines) == {"haiku", "sonnet"}
    p = sps.fisher_exact([[4, 0], [0, 4]], alternative="greater").pvalue
    assert "R4 B-pass 4/4 vs R4-nograph B-fail 4/4" in lines["sonnet"]
    assert f"p = {p:.3f}" in lines["sonnet"] and "-> degradation confirmed" in lines["sonnet"]
    assert "R4 B-pass 0/4 vs R4-nograph B-fail 4/4" in lines["haiku"]
    assert "-> R4 not passing" in lines["haiku"]


def test_summary_has_pass_k_per_cell(tmp_path: Path) -> None:
    """Each cell line carries pass^2 and pass^3 = C(c,k)/C(n,k) of its passes c in n valid reps."""
    root = _sim_archive(tmp_path)
    text = summary_text(root)
    assert "pass^2 pass^3" in text.splitlines()[0]
    for c in cell_table(load_scores(root)).iter_rows(named=True):
        line = next(ln for ln in text.splitlines() if ln.split()[:2] == [c["variant"], c["model_alias"]])
        pk = [f"{100 * math.comb(c['passes'], k) / math.comb(c['n_valid'], k):3.0f}%" for k in (2, 3)]
        assert f"   {pk[0]}   {pk[1]}" in line, line


@pytest.mark.parametrize(
    ("x", "n", "y", "m", "status", "detail"),
    [
        (3, 3, 3, 3, CONFIRMED, "p = 0.050"),
        (5, 5, 4, 5, CONFIRMED, "p = 0.024"),
        (1, 1, 1, 1, NOT_SHOWN, "can never reach"),
        (2, 2, 2, 2, NOT_SHOWN, "can never reach"),
        (3, 5, 4, 5, NOT_SHOWN, "not significant"),
        (3, 3, 0, 3, NOT_SHOWN, "as often as the base"),
        (0, 3, 3, 3, BASE_NOT_PASSING, "never passed"),
        (0, 0, 3, 3, BASE_NOT_PASSING, "no valid base run"),
        (3, 3, 0, 0, NOT_SHOWN, "no valid run of the degradation variant"),
    ],
)
def test_degradation_rule(x, n, y, m, status, detail) -> None:
    """The rule: base (b) passes x/n, variant (b) fails y/m -> confirmed / not shown / base not passing."""
    got, p, why = classify(x, n, y, m)
    assert (got, detail in why) == (status, True), why
    if n and m:
        assert p == pytest.approx(sps.fisher_exact([[x, n - x], [m - y, y]], alternative="greater").pvalue)


def test_expected_failure_is_only_a_pass_fail_on_a_degradation_variant() -> None:
    """Only R4-nograph with A:PASS, B:FAIL is an expected failure; every other valid FAIL is unexpected."""
    df = pl.DataFrame(
        {
            "variant": ["R4-nograph", "R4-nograph", "R4-nograph", "R4", "R4-nograph"],
            "valid": [True, True, True, True, False],
            "axis_a": [True, False, True, True, None],
            "axis_b": [False, False, True, False, None],
            "verdict": ["FAIL", "FAIL", "PASS", "FAIL", "INVALID"],
        }
    )
    variants = {"R4-nograph": "R4"}
    assert expected_failure(df, variants).to_list() == [True, False, False, False, False]
    assert unexpected_failures(df, variants) == 2
    assert expected_fail_variants() == {"R4-nograph": "R4"}


def test_one_cell_definition(tmp_path: Path) -> None:
    """cell_counts groups by the same keys as the statistics (variant × model × plugin): two plugins
    of one variant × model are two cells, with the counts cell_table reports."""
    from analysis.summary import cell_counts

    root = tmp_path / "a"
    write_archive(root, simulate_scores(reps=2, seed=1, plugin_hash="plugA"))
    write_archive(root, simulate_scores(reps=2, seed=2, plugin_hash="plugB"))
    scores = load_scores(root)
    counts = cell_counts(scores)
    cells = cell_table(scores)
    assert counts.height == cells.height and set(counts["plugin_hash"]) == {"plugA", "plugB"}
    joined = counts.join(cells, on=["variant", "model_alias", "plugin_hash"])
    assert joined.height == cells.height
    assert (joined["valid"] == joined["n_valid"]).all() and (joined["passed"] == joined["passes"]).all()


def test_summary_aligns_long_model_names_and_speaks_in_singular(tmp_path: Path) -> None:
    """A model name longer than the default column keeps every column aligned; one scenario is
    "over 1 scenario", several invalid runs are "N invalid runs"."""
    long = "claude-sonnet-4-5-20250929-with-a-long-alias"
    rates = {("R1", long): 0.5, ("R1", "haiku"): 0.5, ("R4-nograph", "haiku"): 0.0}
    root = tmp_path / "a"
    write_archive(root, simulate_scores(rates, reps=6, seed=1, invalid_rate=0.3))
    text = summary_text(root)
    lines = text.splitlines()
    cell_lines = [ln for ln in lines if ln.startswith(("R1 ", "R4-nograph "))]
    assert len(cell_lines) == 3
    head = lines[0]
    assert len({ln.index("sim0") for ln in cell_lines}) == 1
    assert head.index("plugin") == cell_lines[0].index("sim0")
    grid_lines = [ln for ln in lines if ln.startswith("  ") and "over " in ln]
    assert len({ln.index("sim0") for ln in grid_lines}) == 1
    assert len(grid_lines) == 2 and all("over 1 scenario," in ln for ln in grid_lines)
    n_invalid = int((~load_scores(root)["valid"]).sum())
    assert n_invalid > 1 and f"\n{n_invalid} invalid runs excluded" in text
