"""Importing transcripts recorded elsewhere, including a truncated one and noise on stdout."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import polars as pl
import pytest

from evalb.archive import Archive
from evalb.errors import UsageError
from evalb.sandbox import build_sandbox
from runner.importer import import_transcript
from tests.conftest import GOLDEN


class TestImport:
    @pytest.mark.parametrize(
        ("name", "hook", "outcome", "malformed"),
        [
            ("no-plugin.jsonl", False, "completed", 0),
            ("plugin-hook-bash.jsonl", True, "completed", 0),
            ("plugin-skill-read-error.jsonl", True, "completed", 0),
            ("killed-mid-line.jsonl", True, "crashed", 1),
            ("noise-on-stdout.jsonl", False, "completed", 1),
        ],
    )
    def test_golden_transcripts(
        self, tmp_path: Path, name: str, hook: bool, outcome: str, malformed: int
    ) -> None:
        """Each sample imports with its hook flag, outcome, and malformed lines kept raw and flagged."""
        archive = Archive(tmp_path / "a")
        run = import_transcript(GOLDEN / name, archive, scenario="R1", model="haiku")
        assert run is not None
        assert (run.hook_seen, run.outcome, run.n_malformed) == (hook, outcome, malformed)
        events = pl.read_parquet(archive.root / "events" / f"{run.run_id}.parquet")
        lines = [ln for ln in (GOLDEN / name).read_text().splitlines() if ln.strip()]
        assert events.group_by("seq").agg(pl.col("raw").first()).sort("seq")["raw"].to_list() == lines
        assert events.filter(pl.col("malformed")).height == malformed

    def test_reimport_is_skipped(self, tmp_path: Path) -> None:
        archive = Archive(tmp_path / "a")
        assert (
            import_transcript(GOLDEN / "no-plugin.jsonl", archive, scenario="R1", model="haiku") is not None
        )
        assert import_transcript(GOLDEN / "no-plugin.jsonl", archive, scenario="R1", model="haiku") is None
        assert pl.read_parquet(str(archive.root / "runs" / "*.parquet")).height == 1

    def test_sandbox_end_state_is_archived(self, tmp_path: Path) -> None:
        """--sandbox (built with `evalb sandbox`) adds what changed against the fixture's tree."""
        sb = tmp_path / "sb"
        build_sandbox("W1", sb)
        (sb / "docs" / "adr" / "0007-use-sqlite.md").write_text("# ADR-0007\n")
        (sb / "README.md").unlink()
        archive = Archive(tmp_path / "a")
        run = import_transcript(
            GOLDEN / "plugin-hook-bash.jsonl", archive, scenario="W1", model="haiku", sandbox=sb
        )
        assert run is not None and json.loads(run.capture_json or "")["changes"] == {"added": 1, "deleted": 1}
        arts = pl.read_parquet(archive.root / "artifacts" / f"{run.run_id}.parquet")
        row = arts.filter(pl.col("path") == "docs/adr/0007-use-sqlite.md").row(0, named=True)
        assert (row["kind"], row["change"], row["content"], row["git_status"]) == (
            "file", "added", "# ADR-0007\n", None
        )  # fmt: skip
        with pytest.raises(UsageError, match="is not a directory"):
            import_transcript(
                GOLDEN / "no-plugin.jsonl", archive, scenario="W1", model="x", sandbox=tmp_path / "no"
            )

    def test_cli_import_and_bad_scenario(self, tmp_path: Path) -> None:
        """The CLI imports; an unknown scenario is one line on stderr, exit 2, nothing written."""
        exe = Path(".venv/bin/evalb-record").resolve()
        ok = subprocess.run(
            [
                exe,
                "import",
                GOLDEN / "killed-mid-line.jsonl",
                "--scenario",
                "R2",
                "--model",
                "haiku",
                "--archive",
                tmp_path / "a",
            ],
            capture_output=True,
            text=True,
        )
        assert ok.returncode == 0, ok.stderr
        assert "1 malformed lines kept raw" in ok.stderr
        bad = subprocess.run(
            [
                exe,
                "import",
                GOLDEN / "no-plugin.jsonl",
                "--scenario",
                "R9",
                "--model",
                "haiku",
                "--archive",
                tmp_path / "b",
            ],
            capture_output=True,
            text=True,
        )
        assert bad.returncode == 2
        assert (
            bad.stderr.startswith("error: unknown scenario 'R9' (choose one of: ")
            and bad.stderr.count("\n") == 1
        )
        assert not (tmp_path / "b").exists()
