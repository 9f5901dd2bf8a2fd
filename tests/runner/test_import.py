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

    def test_line_separators_inside_strings_and_bad_bytes(self, tmp_path: Path) -> None:
        """NEL (U+0085) and U+2028/U+2029 written raw inside JSON strings do not end a line (the
        transcript stays `completed`, not a crashed one of cut lines); a lone surrogate escape
        imports with U+FFFD in the text; a line of invalid UTF-8 is kept byte for byte (base64)."""
        import base64
        import json

        lines = (GOLDEN / "plugin-hook-bash.jsonl").read_bytes().split(b"\n")
        lines = [ln for ln in lines if ln.strip()]
        out = []
        odd = "a\x85b\u2028c\u2029d\x1ce\x0bf"
        for ln in lines:
            obj = json.loads(ln)
            blocks = obj.get("message", {}).get("content")
            if obj["type"] == "assistant" and isinstance(blocks, list):
                for b in blocks:
                    if b.get("type") == "text":
                        b["text"] += odd
            if obj["type"] == "user" and isinstance(blocks, list):
                for b in blocks:
                    if b.get("type") == "tool_result" and isinstance(b.get("content"), str):
                        b["content"] += "\ud83d"  # dumped as the escape \ud83d, as the client does
            text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
            out.append(text.replace("\ud83d", "\\ud83d").encode())
        out.append(b"\xff\xfe noise \xc3")
        path = tmp_path / "hostile.jsonl"
        path.write_bytes(b"\n".join(out) + b"\n")
        assert len(path.read_bytes().decode("utf-8", "replace").splitlines()) > len(
            out
        )  # str.splitlines would cut

        archive = Archive(tmp_path / "a")
        run = import_transcript(path, archive, scenario="R1", model="haiku")
        assert run is not None
        assert (run.outcome, run.n_lines, run.n_malformed) == ("completed", len(out), 1)
        ev = pl.read_parquet(archive.root / "events" / f"{run.run_id}.parquet").sort("seq", "block_index")
        first = ev.group_by("seq", maintain_order=True).agg(
            pl.col("raw").first(), pl.col("raw_encoding").first()
        )
        kept = [base64.b64decode(r) if e == "base64" else r.encode() for _, r, e in first.rows()]
        assert kept == out
        assert first["raw_encoding"].to_list() == [None] * (len(out) - 1) + ["base64"]
        texts = ev.filter(pl.col("block_type") == "text")["text"].to_list()
        assert any(t.endswith(odd) for t in texts)
        results = ev.filter(pl.col("block_type") == "tool_result")["text"].to_list()
        assert results and all(t.endswith("\ufffd") for t in results)
