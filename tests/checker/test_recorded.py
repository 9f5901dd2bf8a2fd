"""Genuine transcripts recorded by the real client against the scripted model score as expected."""

from __future__ import annotations

import pytest

from analysis.checker import latest_scores, score_archive
from analysis.judge import CommandJudge
from evalb.scenarios import all_variant_ids
from tests.checker.helpers import ab
from tests.conftest import SCRIPTED_JUDGE

pytestmark = pytest.mark.client


def test_oracle_passes_and_oblivious_fails(demo_archive, copy_archive) -> None:
    """scripted:oracle PASSes everywhere except R4-nograph's axis (b); scripted:oblivious FAILs everywhere."""
    root = copy_archive(demo_archive)
    sp = score_archive(root, judge=CommandJudge(SCRIPTED_JUDGE))
    got = {}
    for r in sp.scores.iter_rows(named=True):
        got.setdefault((r["variant"], r["model_alias"]), set()).add(
            (ab(r["axis_a"]), ab(r["axis_b"]), r["verdict"])
        )
    variants = set(all_variant_ids())
    assert {v for v, _ in got} == variants
    for v in variants:
        oracle = ("PASS", "FAIL", "FAIL") if v == "R4-nograph" else ("PASS", "PASS", "PASS")
        assert got[(v, "scripted:oracle")] == {oracle}, (
            v,
            sp.scores.filter(sp.scores["variant"] == v)["reasons"].to_list(),
        )
        assert {g[2] for g in got[(v, "scripted:oblivious")]} == {"FAIL"}, v
    # Written back: the statistics read exactly these rows.
    latest = latest_scores(root)
    assert latest.height == sp.scores.height and set(latest["checker_hash"]) == {sp.checker_hash}
