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


def test_scripted_runs_are_judged_by_the_scripted_judge_by_default(
    demo_archive, tmp_path, monkeypatch
) -> None:
    """Scored with no ADR_EVAL_B_JUDGE_CMD, an archive recorded with scripted models gives the
    verdicts it gives with ADR_EVAL_B_JUDGE_CMD=evalb-scripted-judge (no haiku, no INVALID)."""
    import shutil

    from analysis.judge import ENV_CMD

    plain, with_env = tmp_path / "plain", tmp_path / "env"
    shutil.copytree(demo_archive, plain)
    shutil.copytree(demo_archive, with_env)
    monkeypatch.delenv(ENV_CMD, raising=False)
    default = score_archive(plain, rescore=True)
    monkeypatch.setenv(ENV_CMD, SCRIPTED_JUDGE)
    explicit = score_archive(with_env, rescore=True)

    def verdicts(sp):  # type: ignore[no-untyped-def]
        return {
            r["run_id"]: (r["axis_a"], r["axis_b"], r["verdict"]) for r in sp.scores.iter_rows(named=True)
        }

    assert default.judge_calls > 0 and not default.judge_errors
    assert verdicts(default) == verdicts(explicit)
    assert "INVALID" not in set(default.scores["verdict"])


def test_haiku_judge_without_credentials_is_a_configuration_error(tmp_path, monkeypatch) -> None:
    """A real-model W run, scored with no judge command and a client that is not logged in: the
    real client says "Not logged in"; the library raises ConfigurationError with that reason, the CLI
    prints one line and exits 2, and the archive is byte-identical."""
    import subprocess

    from analysis.judge import ENV_CMD
    from evalb.errors import ConfigurationError
    from tests.checker.helpers import Runs, hooked

    root = tmp_path / "a"
    runs = Runs(root)
    runs.add("w", hooked().text("Done.").result("Done.").lines, "W1", model="haiku")
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var in (ENV_CMD, "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"):
        monkeypatch.delenv(var, raising=False)

    def snapshot() -> dict[str, bytes]:
        return {str(p): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}

    before = snapshot()
    with pytest.raises(ConfigurationError, match="Not logged in"):
        score_archive(root)
    assert snapshot() == before
    import os
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "evalb-score"
    res = subprocess.run(
        [str(script), "--archive", str(root)],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ.copy(),
    )
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Not logged in" in lines[0] and "Traceback" not in res.stderr
    assert snapshot() == before
