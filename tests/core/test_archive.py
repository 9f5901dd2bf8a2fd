"""The archive's storage contract: documented schema, crash recovery, version checks, empty reads."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import polars as pl
import pytest

from cli.app import exit_code_for
from evalb import schema_doc
from evalb.archive import Archive, connect, read_table
from evalb.errors import ArchiveError, NotAnArchiveError
from evalb.schema import SCHEMA_VERSION, RunRecord, columns, run_record

HOOK = '{"type":"system","subtype":"hook_response","hook_event":"SessionStart","output":"{}"}'
ASSISTANT = (
    '{"type":"assistant","message":{"id":"m1","role":"assistant","content":[{"type":"text","text":"hi"}]}}'
)


def _run(run_id: str = "r1") -> RunRecord:
    fields = {name: None for name in RunRecord.model_fields}
    fields.update(
        run_id=run_id, schema_version=SCHEMA_VERSION, slot="R1|haiku|abc|0", source="record", scenario="R1",
        variant="R1", model_alias="haiku", rep=0, attempt=1, started_at=dt.datetime.now(dt.UTC),
        outcome="interrupted", outcome_detail="", reached_model=False, hook_seen=False, client_path="claude",
        api_retries=0, confinement="bwrap", stderr="", n_lines=0, n_malformed=0, recorder_version="0",
        host="h", options_json="{}", arm="default",
    )  # fmt: skip
    return run_record(**fields)


class TestDocs:
    def test_archive_doc_lists_every_column(self) -> None:
        """docs/archive.md's tables are what the schema generates (run `python -m evalb.schema_doc`)."""
        assert schema_doc.main(["--check"]) == 0
        text = schema_doc.DOC.read_text()
        for table in ("runs", "events", "artifacts", "judgements", "scores"):
            for col in columns(table):
                assert f"| `{col}` |" in text


class TestRecovery:
    def test_a_dead_recorders_rep_is_committed_as_interrupted(self, tmp_path: Path) -> None:
        """Lines journaled before the recorder died survive, torn last entry and all, as `interrupted`."""
        archive = Archive(tmp_path / "a")
        archive.ensure()
        inflight = archive.begin_run(_run())
        inflight.append(HOOK)
        inflight.append(ASSISTANT)
        inflight.append('{"type":"user","mess')  # the client was killed mid-line
        inflight._journal.write('{"t": "2026-')  # and the recorder mid-journal-entry
        inflight._journal.flush()
        assert archive.recover_stale() == []  # the recorder still holds its lock: not stale
        inflight.abandon()  # what the kernel does when the recorder dies
        assert archive.recover_stale() == ["r1"]
        run = read_table(archive.root, "runs").row(0, named=True)
        assert (run["outcome"], run["n_lines"], run["n_malformed"], run["hook_seen"], run["reached_model"]) == (
            "interrupted", 3, 1, True, True,
        )  # fmt: skip
        events = read_table(archive.root, "events")
        assert events["raw"].to_list() == [HOOK, ASSISTANT, '{"type":"user","mess']
        assert not list(archive.inflight_dir.iterdir())
        assert archive.committed_slots() == {}  # an interrupted rep does not fill its slot

    def test_committed_run_leaves_no_journal(self, tmp_path: Path) -> None:
        archive = Archive(tmp_path / "a")
        archive.ensure()
        inflight = archive.begin_run(_run())
        inflight.append(ASSISTANT)
        inflight.commit(_run().model_copy(update={"outcome": "completed"}), [])
        assert archive.committed_slots() == {"R1|haiku|abc|0": "completed"}
        assert archive.recover_stale() == [] and not list(archive.inflight_dir.iterdir())


class TestVersions:
    def _marker(self, root: Path, version: int) -> None:
        root.mkdir(parents=True)
        (root / "archive.json").write_text(json.dumps({"format": "evalb-archive", "schema_version": version}))

    def test_newer_archive_is_refused(self, tmp_path: Path) -> None:
        self._marker(tmp_path / "a", SCHEMA_VERSION + 1)
        with pytest.raises(ArchiveError, match="newer than this evalb"):
            connect(tmp_path / "a")

    def test_older_archive_names_the_migration(self, tmp_path: Path) -> None:
        self._marker(tmp_path / "a", SCHEMA_VERSION - 1)
        with pytest.raises(ArchiveError) as err:
            connect(tmp_path / "a")
        assert "evalb-record migrate" in err.value.one_line()

    def test_not_an_archive(self, tmp_path: Path) -> None:
        with pytest.raises(ArchiveError, match="is not an evalb archive"):
            connect(tmp_path)


class TestEmptyReads:
    def test_empty_tables_have_their_schema(self, tmp_path: Path) -> None:
        """Reading a fresh archive gives typed empty tables, in Polars and in DuckDB."""
        Archive(tmp_path / "a").ensure()
        assert read_table(tmp_path / "a", "scores").columns == columns("scores")
        con = connect(tmp_path / "a")
        assert con.execute("SELECT count(*) FROM events").fetchone() == (0,)
        assert [d[0] for d in con.execute("SELECT * FROM runs").description] == columns("runs")
        assert isinstance(read_table(tmp_path / "a", "runs"), pl.DataFrame)


class TestTempFiles:
    def test_a_killed_writers_temp_files_are_swept_a_live_ones_kept(self, tmp_path: Path) -> None:
        """Recovery removes hidden temp files whose writer is dead; a live writer's stay."""
        import os
        import subprocess

        archive = Archive(tmp_path / "a")
        archive.ensure()
        proc = subprocess.Popen(["true"])
        proc.wait()  # its pid is now free (reuse within the test is vanishingly unlikely)
        stale = archive.root / "runs" / f".x.parquet.{proc.pid}-abcd1234.tmp"
        live = archive.root / "runs" / f".y.parquet.{os.getpid()}-abcd1234.tmp"
        foreign = archive.root / "runs" / ".z.parquet.tmp"  # not ours: no pid, left alone
        for p in (stale, live, foreign):
            p.write_bytes(b"partial")
        archive.recover_stale()
        assert (stale.exists(), live.exists(), foreign.exists()) == (False, True, True)


class TestOpen:
    """`Archive.open` for readers, `Archive.create_or_open` for recorders: validated once, typed errors."""

    def test_open_a_missing_path_creates_nothing(self, tmp_path: Path) -> None:
        with pytest.raises(NotAnArchiveError, match="no such folder") as err:
            Archive.open(tmp_path / "typo")
        assert exit_code_for(err.value) == 2 and not (tmp_path / "typo").exists()

    @pytest.mark.parametrize("content", [None, "notes.txt"])
    def test_open_a_folder_that_is_not_an_archive(self, tmp_path: Path, content: str | None) -> None:
        if content:
            (tmp_path / content).write_text("x")
        with pytest.raises(NotAnArchiveError, match="is not an evalb archive"):
            Archive.open(tmp_path)
        assert sorted(p.name for p in tmp_path.iterdir()) == ([content] if content else [])

    def test_open_a_file(self, tmp_path: Path) -> None:
        (tmp_path / "f").write_text("x")
        with pytest.raises(NotAnArchiveError, match="is a file"):
            Archive.open(tmp_path / "f")

    def test_create_refuses_a_foreign_folder_and_writes_nothing(self, tmp_path: Path) -> None:
        (tmp_path / "src").mkdir()
        (tmp_path / "main.py").write_text("print()")
        with pytest.raises(NotAnArchiveError, match="not an evalb archive and not empty") as err:
            Archive.create_or_open(tmp_path)
        assert "'main.py' and 1 more" in err.value.one_line()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["main.py", "src"]

    def test_create_a_new_or_empty_folder_then_open_it(self, tmp_path: Path) -> None:
        Archive.create_or_open(tmp_path / "new")
        tmp_path.joinpath("empty").mkdir()
        Archive.create_or_open(tmp_path / "empty")
        for name in ("new", "empty"):
            assert Archive.open(tmp_path / name).read("runs").height == 0
        Archive.create_or_open(tmp_path / "new")  # an archive reopens

    def test_a_quote_and_glob_characters_in_the_path(self, tmp_path: Path) -> None:
        """Paths go to DuckDB and Polars as values, never pasted into SQL or read as globs."""
        root = tmp_path / "it's [a] *archive*"
        archive = Archive.create_or_open(root)
        archive.commit_run(_run("r1"), [], [])
        con = Archive.open(root).connect()
        assert con.execute("SELECT run_id FROM runs").fetchall() == [("r1",)]
        assert con.execute("SELECT count(*) FROM scores").fetchone() == (0,)
        assert archive.read("runs", ["run_id"])["run_id"].to_list() == ["r1"]
        assert archive.latest_scores().is_empty()


class TestJournalModule:
    def test_the_journal_lives_in_its_own_module(self) -> None:
        """Recovery and the in-flight journal are in evalb.journal; Archive only delegates."""
        from evalb import journal

        assert journal.InflightRun.__module__ == "evalb.journal"
        for name in ("recover_stale", "recover_one", "quarantine", "commit_interrupted", "read_journal"):
            assert callable(getattr(journal, name))


class TestRunRecord:
    def test_factory_takes_the_summary_and_names_the_judge(self) -> None:
        from evalb.transcript import TranscriptSummary

        summary = TranscriptSummary()
        summary.feed(HOOK)
        summary.feed(ASSISTANT)
        skip = {*summary.run_fields(), "options_json"}
        fields = {k: v for k, v in _run().model_dump().items() if k not in skip}
        run = run_record(summary, **{**fields, "model_alias": "scripted:oracle"})
        assert run.hook_seen and run.reached_model and run.schema_version == SCHEMA_VERSION
        assert json.loads(run.options_json) == {"judge": "scripted"}
        kept = run_record(summary, **{**fields, "options_json": '{"judge": "opus", "timeout_s": 5}'})
        assert json.loads(kept.options_json) == {"judge": "opus", "timeout_s": 5}


class TestRecoverTypo:
    def test_recover_on_a_typo_path_creates_nothing(self, tmp_path: Path) -> None:
        """`evalb-record recover --archive TYPO`: one line, exit 2, no empty archive left behind."""
        import subprocess

        script = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "evalb-record"
        typo = tmp_path / "archiv"
        res = subprocess.run(
            [str(script), "recover", "--archive", str(typo)], capture_output=True, text=True, timeout=120
        )
        assert res.returncode == 2 and "no such folder" in res.stderr, res.stderr
        assert len(res.stderr.strip().splitlines()) == 1 and not typo.exists()
        with pytest.raises(NotAnArchiveError):
            Archive.open(typo, writable=True)
        assert not typo.exists()
        Archive.create_or_open(typo)
        assert Archive.open(typo, writable=True).exists()
