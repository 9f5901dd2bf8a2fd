"""Bulk import (`evalb-record import` of many transcripts in one process): the same runs as one by
one, re-imports skipped, a hostile transcript reported while the others land, manifest mistakes
refused before anything is written."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import polars as pl
import pytest

from evalb.archive import Archive
from evalb.sandbox import build_sandbox
from runner.import_inputs import ImportItem
from runner.importer import Importer, ImportIndex, import_transcript
from tests.conftest import GOLDEN

EXE = Path(".venv/bin/evalb-record").resolve()
#: Columns that differ between two imports of the same transcript by design.
VOLATILE = ("run_id",)


def cli(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EXE, "import", *map(str, args)], capture_output=True, text=True)


def golden_copy(dest: Path) -> list[Path]:
    dest.mkdir()
    files = []
    for src in sorted(GOLDEN.glob("*.jsonl")):
        shutil.copy2(src, dest / src.name)
        files.append(dest / src.name)
    return files


def table(archive: Path, name: str, by: list[str]) -> pl.DataFrame:
    """A table with run ids replaced by each run's slot, sorted: comparable across archives."""
    a = Archive(archive)
    df = a.read(name)
    if name != "runs":
        df = df.join(a.read("runs", ["run_id", "slot"]), on="run_id", how="left")
    else:  # how long the sandbox walk took
        df = df.with_columns(pl.col("capture_json").str.replace(r'"seconds": [0-9.e-]+', '"seconds": 0'))
    return df.drop(VOLATILE).sort(["slot", *by])


def assert_same_archives(one: Path, bulk: Path) -> None:
    for name, by in (("runs", []), ("events", ["seq", "block_index"]), ("artifacts", ["path"])):
        a, b = table(one, name, by), table(bulk, name, by)
        assert a.height == b.height, name
        assert a.equals(b, null_equal=True), f"{name} differ"


class TestBulkEqualsOneByOne:
    def test_directory(self, tmp_path: Path) -> None:
        files = golden_copy(tmp_path / "t")
        for f in files:
            assert import_transcript(f, Archive(tmp_path / "one"), scenario="R2", model="haiku") is not None
        res = cli(tmp_path / "t", "--scenario", "R2", "--model", "haiku", "--archive", tmp_path / "bulk")
        assert res.returncode == 0, res.stderr
        assert res.stderr.startswith(f"imported {len(files)} new runs from {len(files)} transcripts")
        assert_same_archives(tmp_path / "one", tmp_path / "bulk")

    def test_manifest_with_scenarios_models_and_a_sandbox(self, tmp_path: Path) -> None:
        files = golden_copy(tmp_path / "t")
        sb = tmp_path / "sb"
        build_sandbox("W1", sb)
        (sb / "docs" / "adr" / "0007-use-sqlite.md").write_text("# ADR-0007\n")
        rows = [
            (files[0], "R1", "haiku", None),
            (files[1], "W1", "sonnet", sb),
            (files[2], "R4-nograph", "haiku", None),
            (files[3], "R2", "opus", None),
        ]
        manifest = tmp_path / "m" / "list.tsv"
        manifest.parent.mkdir()
        lines = ["transcript\tscenario\tmodel\tsandbox"]
        for f, sc, model, sandbox in rows:
            # relative to the manifest's folder; imported_from records the path as joined
            rel = os.path.relpath(f, manifest.parent)
            sb_rel = os.path.relpath(sandbox, manifest.parent) if sandbox else ""
            lines.append(f"{rel}\t{sc}\t{model}\t{sb_rel}")
            run = import_transcript(
                manifest.parent / rel, Archive(tmp_path / "one"), scenario=sc, model=model, sandbox=sandbox
            )
            assert run is not None
        manifest.write_text("\n".join(lines) + "\n")
        res = cli("--manifest", manifest, "--archive", tmp_path / "bulk")
        assert res.returncode == 0, res.stderr
        assert_same_archives(tmp_path / "one", tmp_path / "bulk")
        arts = Archive(tmp_path / "bulk").read("artifacts")
        assert "docs/adr/0007-use-sqlite.md" in arts["path"].to_list()


class TestReimport:
    def test_second_bulk_import_is_skipped(self, tmp_path: Path) -> None:
        files = golden_copy(tmp_path / "t")
        shutil.copy2(files[0], tmp_path / "t" / "same-bytes-other-name.jsonl")
        args = (tmp_path / "t", "--scenario", "R1", "--model", "haiku", "--archive", tmp_path / "a")
        first = cli(*args)
        assert first.returncode == 0, first.stderr
        # the copy has the same bytes, so the same slot: imported once
        assert f"imported {len(files)} new runs from {len(files) + 1} transcripts" in first.stderr
        assert "1 already imported" in first.stderr
        again = cli(*args)
        assert again.returncode == 0, again.stderr
        assert f"imported 0 new runs from {len(files) + 1} transcripts" in again.stderr
        assert f"{len(files) + 1} already imported" in again.stderr
        assert Archive(tmp_path / "a").read("runs").height == len(files)
        # the single-file form sees the bulk import's slots too
        one = cli(files[2], "--scenario", "R1", "--model", "haiku", "--archive", tmp_path / "a")
        assert one.returncode == 0 and one.stderr == f"already imported: {files[2]}\n"

    def test_index_reads_the_slot_column_of_committed_runs(self, tmp_path: Path) -> None:
        archive = Archive(tmp_path / "a")
        run = import_transcript(GOLDEN / "no-plugin.jsonl", archive, scenario="R1", model="haiku")
        assert run is not None
        index = ImportIndex(Archive(tmp_path / "a"))
        assert run.slot in index and "import|R1|haiku|0000000000000000" not in index
        # another model is another slot
        importer = Importer(Archive(tmp_path / "a"))
        results = importer.run(
            [
                ImportItem(GOLDEN / "no-plugin.jsonl", "R1", "haiku"),
                ImportItem(GOLDEN / "no-plugin.jsonl", "R1", "sonnet"),
            ]
        )
        assert [r.skipped for r in results] == [True, False]
        assert results[1].run is not None and results[1].run.slot in importer.index


class TestHostileTranscripts:
    def test_bad_transcript_in_the_middle(self, tmp_path: Path) -> None:
        files = golden_copy(tmp_path / "t")
        t = tmp_path / "t"
        (t / "c-binary.jsonl").write_bytes(bytes(range(256)) * 64)  # no newline, no JSON
        (t / "c-empty.jsonl").write_bytes(b"")
        # a huge line of invalid UTF-8 between valid lines: imported, the line kept as base64
        good = (GOLDEN / "no-plugin.jsonl").read_bytes()
        (t / "d-hugeline.jsonl").write_bytes(good + b"\xff" * (4 << 20) + b"\n" + good)
        before = cli(files[0], "--scenario", "R1", "--model", "haiku", "--archive", tmp_path / "a")
        assert before.returncode == 0, before.stderr
        res = cli(t, "--scenario", "R1", "--model", "haiku", "--archive", tmp_path / "a")
        assert res.returncode == 1, res.stderr
        lines = res.stderr.splitlines()
        failed = [ln for ln in lines if ln.startswith("failed: ")]
        assert failed == [
            f"failed: {t / 'c-binary.jsonl'}: no line is a JSON object (binary or not stream-json)",
            f"failed: {t / 'c-empty.jsonl'}: no line is a JSON object (empty)",
        ]
        assert lines[-1].startswith("imported 5 new runs from 8 transcripts")
        assert "1 already imported, 2 failed, 2 with malformed lines kept raw" in lines[-1]
        runs = Archive(tmp_path / "a").read("runs")
        assert runs.height == 6  # the one imported before, and every good one of the bulk
        huge = runs.filter(pl.col("outcome_detail").str.contains("d-hugeline.jsonl"))
        assert huge.select("n_malformed", "n_lines").row(0) == (1, 11)
        ev = Archive(tmp_path / "a").read("events").filter(pl.col("run_id") == huge["run_id"][0])
        assert ev.filter(pl.col("raw_encoding") == "base64").height == 1

    def test_single_bad_transcript_exits_1_and_writes_no_run(self, tmp_path: Path) -> None:
        bad = tmp_path / "x.jsonl"
        bad.write_bytes(b"\x00\x01\x02 not json\n")
        res = cli(bad, "--scenario", "R1", "--model", "haiku", "--archive", tmp_path / "a")
        assert res.returncode == 1
        assert res.stderr == f"failed: {bad}: no line is a JSON object (binary or not stream-json)\n"
        assert Archive(tmp_path / "a").read("runs").height == 0


class TestManifestMistakes:
    @pytest.mark.parametrize(
        ("header", "row", "start"),
        [
            ("transcript\tmodel", "{t}\thaiku", "error: manifest {m} has no 'scenario' column"),
            (
                "transcript\tscenario\tmodel\tsandbx",
                "{t}\tR1\thaiku\t",
                "error: manifest {m} has unknown column 'sandbx'",
            ),
            ("transcript\tscenario\tmodel", "{t}\tR9\thaiku", "error: unknown scenario 'R9'"),
            ("transcript\tscenario\tmodel", "{t}\tR1", "error: manifest {m} line 3 has 2 fields"),
            ("transcript\tscenario\tmodel", "missing.jsonl\tR1\thaiku", "error: cannot read transcript"),
        ],
    )
    def test_one_line_error_before_anything_is_written(
        self, tmp_path: Path, header: str, row: str, start: str
    ) -> None:
        files = golden_copy(tmp_path / "t")
        m = tmp_path / "list.tsv"
        good = f"{files[0]}\tR1\thaiku" if header.count("\t") == 2 else f"{files[0]}\tR1\thaiku\t"
        good = good if "scenario" in header else f"{files[0]}\thaiku"
        m.write_text("\n".join([header, good, row.format(t=files[1])]) + "\n")
        res = cli("--manifest", m, "--archive", tmp_path / "a")
        assert res.returncode == 2, res.stderr
        assert res.stderr.count("\n") == 1 and res.stderr.startswith(start.format(m=m)), res.stderr
        assert not (tmp_path / "a").exists()

    def test_manifest_excludes_other_sources(self, tmp_path: Path) -> None:
        m = tmp_path / "list.tsv"
        m.write_text(f"transcript\tscenario\tmodel\n{GOLDEN / 'no-plugin.jsonl'}\tR1\thaiku\n")
        res = cli("--manifest", m, "--scenario", "R1", "--archive", tmp_path / "a")
        assert res.returncode == 2 and res.stderr.startswith("error: --manifest and --scenario do not go")
        assert not (tmp_path / "a").exists()


class TestArchiveFailure:
    def test_disk_full_mid_import_keeps_committed_runs_and_leaves_no_orphans(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The third batch's data files cannot be placed (ENOSPC): the import ends with one
        ArchiveError counting the runs kept; those runs are whole, and no file of the failed batch
        is left in the archive."""
        import errno

        from evalb.errors import ArchiveError
        from runner import import_commit

        files = golden_copy(tmp_path / "t")
        calls = {"n": 0}
        real_fsync = import_commit._fsync

        def failing_fsync(path: Path, flags: int = os.O_RDONLY) -> None:
            if path.name.startswith("."):  # a temp file of a batch
                calls["n"] += 1
                if calls["n"] == 7:  # the third batch's first file (a batch: 2 data files, then 1 runs file)
                    raise OSError(errno.ENOSPC, "No space left on device")
            real_fsync(path, flags)

        monkeypatch.setattr(import_commit, "_fsync", failing_fsync)
        monkeypatch.setattr(import_commit, "WRITERS", 1)
        monkeypatch.setattr(import_commit, "_POOL", None)
        importer = Importer(Archive(tmp_path / "a"))
        with pytest.raises(
            ArchiveError, match=r"the disk is full .*\(the 2 runs committed before it are kept\)"
        ):
            # batch=1 and a slow producer: one run per batch
            importer.run([ImportItem(f, "R1", "haiku") for f in files], batch=1)
        a = Archive(tmp_path / "a")
        runs = a.read("runs")
        assert runs.height == 2
        for table in ("events", "artifacts", "runs"):
            names = {Path(p).stem for p in a.files(table)}
            assert names == set(runs["run_id"].to_list()), table
        assert not [p for p in (tmp_path / "a").rglob(".*.tmp")]
