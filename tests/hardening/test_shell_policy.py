"""The test-only scripted:shell policy runs the commands it is given, and only in the test suite."""

from pathlib import Path

import polars as pl
import pytest

from evalb.errors import PolicyError
from runner.scripted.policies import parse_model
from tests.hardening.helpers import check_archive, record_shell


@pytest.mark.client
def test_shell_policy_runs_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    df = record_shell(
        tmp_path / "a", tmp_path, ["echo hello-$((6*7))", "pwd"], monkeypatch=monkeypatch, final="All done."
    )
    check_archive(tmp_path / "a")
    assert df["outcome"].to_list() == ["completed"]
    ev = pl.read_parquet(str(tmp_path / "a" / "events" / "*.parquet"))
    assert "hello-42" in "".join(t or "" for t in ev.filter(pl.col("block_type") == "tool_result")["text"])


def test_shell_policy_refused_outside_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EVALB_TEST_POLICIES")
    with pytest.raises(PolicyError, match="test policy"):
        parse_model("scripted:shell")
