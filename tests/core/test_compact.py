"""Compaction: committed small files folded into sorted batches, atomically for readers, beside a
live recorder (a real process), and what every reader of the archive sees afterwards."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from cli.app import invoke
from evalb import compact
from evalb.archive import Archive
from evalb.errors import ArchiveError
from tests.core.test_compact_helpers import commit, judgement_rows, score_rows

HELPERS = Path(__file__).with_name("test_compact_helpers.py")
RUN_TABLES = ("runs", "events", "artifacts")


def _archive(tmp_path: Path, n: int = 0) -> tuple[Archive, list[str]]:
    archive = Archive(tmp_path / "a")
    archive.ensure()
    ids = [commit(archive, rep=i) for i in range(n)]
    return archive, ids


def _tables(root: Path) -> dict[str, pl.DataFrame]:
    a = Archive.open(root)
    return {t: a.read(t).sort(pl.all()) for t in ("runs", "events", "artifacts", "judgements", "scores")}


class TestCompaction:
    def test_rows_are_kept_and_sorted_and_files_fewer(self, tmp_path: Path) -> None:
        archive, ids = _archive(tmp_path, 30)
        archive.append_rows("scores", score_rows(ids[:10]))
        archive.append_rows("scores", score_rows(ids[10:], "c2"))
        archive.append_rows("judgements", judgement_rows(ids))
        before = _tables(archive.root)
        slots = archive.committed_slots()

        rep = compact.compact(archive, grace=0)
        assert rep.batch and rep.runs == 30

        fresh = Archive.open(archive.root)
        for t, df in _tables(archive.root).items():
            assert df.equals(before[t]), t
            files = fresh.files(t)
            assert len(files) == 1 and Path(files[0]).name.startswith(compact.PREFIX), (t, files)
        # the covered small files are gone (grace 0); what is left is the batch
        assert sorted(os.listdir(archive.root / "events")) == [Path(fresh.files("events")[0]).name]
        events = pl.read_parquet(fresh.files("events")[0])
        assert events.select("run_id", "seq").equals(events.select("run_id", "seq").sort("run_id", "seq"))
        meta = pq.ParquetFile(fresh.files("events")[0]).metadata
        assert meta.row_group(0).column(0).statistics.has_min_max  # run_id ranges let readers skip
        assert fresh.committed_slots() == slots
        assert len(fresh.latest_scores()) == 30

    def test_a_column_only_some_files_have_is_kept(self, tmp_path: Path) -> None:
        """A column a migration kept (unknown to the schema) survives compaction, null elsewhere."""
        archive, ids = _archive(tmp_path, 3)
        path = archive.root / "events" / f"{ids[1]}.parquet"
        pl.read_parquet(path).with_columns(legacy=pl.lit("kept")).write_parquet(path)
        compact.compact(archive, grace=0)
        df = pl.read_parquet(archive.files("events")[0])
        assert df.filter(pl.col("run_id") == ids[1])["legacy"].to_list() == ["kept"] * 5
        assert df.filter(pl.col("run_id") != ids[1])["legacy"].null_count() == 10

    def test_duckdb_views_and_lazy_scans_read_batches(self, tmp_path: Path) -> None:
        archive, ids = _archive(tmp_path, 5)
        compact.compact(archive, grace=0)
        ids += [commit(archive, rep=10 + i) for i in range(3)]  # small files beside the batch
        con = archive.connect()
        got = sorted(r[0] for r in con.execute("SELECT run_id FROM runs").fetchall())
        assert got == sorted(ids)
        n = con.execute("SELECT count(DISTINCT run_id) FROM events").fetchone()
        assert n == (8,)
        assert archive.scan("artifacts").select(pl.len()).collect().item() == 8

    def test_a_second_compaction_adds_a_batch_and_full_folds_them_into_one(self, tmp_path: Path) -> None:
        archive, ids = _archive(tmp_path, 4)
        compact.compact(archive, grace=0)
        ids += [commit(archive, rep=10 + i) for i in range(4)]
        compact.compact(archive, grace=0)
        assert len(archive.files("events")) == 2
        before = _tables(archive.root)
        rep = compact.compact(archive, grace=0, full=True)
        assert rep.runs == 8
        assert all(len(archive.files(t)) == 1 for t in RUN_TABLES)
        after = _tables(archive.root)
        assert all(after[t].equals(before[t]) for t in before)
        gen = compact.read_generation(archive.root)
        assert len(gen.batches) == 1 and gen.retired == ()  # grace 0: superseded batches deleted

    def test_parts_hold_disjoint_sorted_run_ranges(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(compact, "PART_RUNS", 4)
        archive, ids = _archive(tmp_path, 10)
        compact.compact(archive, grace=0)
        parts = archive.files("events")
        assert len(parts) == 3
        ranges = [pl.read_parquet(p)["run_id"] for p in parts]
        assert sorted(ids) == [r for s in ranges for r in s.unique(maintain_order=True).to_list()]

    def test_grace_keeps_covered_files_until_a_later_compaction(self, tmp_path: Path) -> None:
        archive, ids = _archive(tmp_path, 3)
        rep = compact.compact(archive, grace=3600)
        assert rep.deleted == 0 and rep.waiting == 9
        # a reader holding the old list can still read it; the new list has the batch only
        assert all((archive.root / t / f"{i}.parquet").exists() for t in RUN_TABLES for i in ids)
        assert len(archive.files("runs")) == 1
        assert sorted(archive.read("runs")["run_id"]) == sorted(ids)
        rep = compact.compact(archive, grace=0)  # the next one, past the grace period
        assert rep.deleted == 9
        assert not any((archive.root / "runs" / f"{i}.parquet").exists() for i in ids)

    def test_only_committed_runs_are_folded(self, tmp_path: Path) -> None:
        """Events written before their runs file (a commit in progress) stay small and uncovered."""
        archive, ids = _archive(tmp_path, 2)
        pending = "f" * 32
        os.link(archive.root / "events" / f"{ids[0]}.parquet", archive.root / "events" / f"{pending}.parquet")
        compact.compact(archive, grace=0)
        assert (archive.root / "events" / f"{pending}.parquet").exists()
        assert str(archive.root / "events" / f"{pending}.parquet") in archive.files("events")

    def test_an_unpublished_batch_is_ignored_then_removed(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A compactor killed before its switch leaves files nobody reads; the next one removes them."""
        archive, ids = _archive(tmp_path, 3)

        def killed(root: Path, gen: compact.Generation) -> None:
            raise KeyboardInterrupt

        with monkeypatch.context() as m:
            m.setattr(compact, "publish", killed)
            with pytest.raises(KeyboardInterrupt):
                compact.compact(archive, grace=0)
        orphans = [n for n in os.listdir(archive.root / "events") if n.startswith(compact.PREFIX)]
        assert orphans
        assert sorted(archive.read("runs")["run_id"]) == sorted(ids)  # old set, whole
        assert len(archive.files("events")) == 3
        compact.compact(archive, grace=0)
        assert not any((archive.root / "events" / n).exists() for n in orphans)
        assert sorted(archive.read("runs")["run_id"]) == sorted(ids)

    def test_a_missing_batch_file_is_an_error_not_missing_runs(self, tmp_path: Path) -> None:
        archive, _ = _archive(tmp_path, 2)
        compact.compact(archive, grace=0)
        Path(archive.files("events")[0]).unlink()
        with pytest.raises(ArchiveError, match="missing"):
            archive.files("events")

    def test_a_newer_manifest_format_is_refused(self, tmp_path: Path) -> None:
        archive, _ = _archive(tmp_path, 1)
        compact.compact(archive, grace=0)
        path = compact.manifest_path(archive.root)
        path.write_text(json.dumps({**json.loads(path.read_text()), "version": compact.VERSION + 1}))
        with pytest.raises(ArchiveError, match="newer evalb"):
            archive.files("runs")

    def test_a_second_compactor_waits_or_skips(self, tmp_path: Path) -> None:
        archive, _ = _archive(tmp_path, 2)
        with compact.compaction_lock(archive.root, wait=False) as mine:
            assert mine
            rep = compact.compact(archive, wait=False)
        assert rep.skipped and "another compaction" in rep.skipped

    def test_committed_slots_reads_the_batch_not_every_run(self, tmp_path: Path) -> None:
        archive, _ = _archive(tmp_path, 20)
        commit(archive, rep=99, outcome="interrupted")  # does not fill its slot
        compact.compact(archive, grace=0)
        fresh = Archive.open(archive.root)
        slots = fresh.committed_slots()
        assert len(slots) == 20 and all(v == "completed" for v in slots.values())
        assert len(fresh._runs_seen) == 1  # one compacted file read, not 21
        rid = commit(fresh, rep=50)
        assert f"R1|scripted:oracle|{'p' * 16}|50" in fresh.committed_slots()
        assert len(fresh._runs_seen) == 2 and rid


class TestConcurrency:
    def test_readers_see_every_committed_run_once_while_a_recorder_and_compactions_run(
        self, tmp_path: Path
    ) -> None:
        """A real recorder process commits runs in a loop; compactions (with deletion of covered
        files after a short grace) run meanwhile; readers in a loop always see each run committed
        before their listing exactly once, in runs and in events, and never lose one."""
        archive = Archive(tmp_path / "a")
        archive.ensure()
        stop = tmp_path / "stop"
        rec = subprocess.Popen(
            [sys.executable, str(HELPERS), str(archive.root), str(stop)],
            stdout=subprocess.PIPE,
            text=True,
        )
        committed: list[str] = []
        lock = threading.Lock()

        def collect() -> None:
            assert rec.stdout is not None
            for line in rec.stdout:
                with lock:
                    committed.append(line.strip())

        failures: list[str] = []
        done = threading.Event()
        checks = [0]

        def reader() -> None:
            seen: set[str] = set()
            while not done.is_set():
                with lock:
                    known = set(committed)
                a = Archive(archive.root)
                try:
                    runs = a.read("runs", ["run_id"])["run_id"]
                    ev = a.read("events", ["run_id", "seq", "block_index"])
                except Exception as e:
                    failures.append(f"read failed: {type(e).__name__}: {e}")
                    return
                ids = set(runs)
                if len(ids) != len(runs):
                    failures.append(f"{len(runs) - len(ids)} runs seen twice")
                if not known <= ids:
                    failures.append(f"{len(known - ids)} committed runs not seen")
                if not seen <= ids:
                    failures.append(f"{len(seen - ids)} runs seen before disappeared")
                if ev.height != ev.unique().height:
                    failures.append("event rows seen twice")
                if not known <= set(ev["run_id"]):
                    failures.append("committed runs without their events")
                seen = ids
                checks[0] += 1
                if failures:
                    return

        def compactor() -> None:
            while not done.is_set():
                try:
                    compact.compact(Archive(archive.root), grace=1.0)
                except Exception as e:
                    failures.append(f"compaction failed: {type(e).__name__}: {e}")
                    return
                time.sleep(0.2)

        threads = [threading.Thread(target=collect)]
        threads += [threading.Thread(target=reader) for _ in range(2)]
        threads.append(threading.Thread(target=compactor))
        for t in threads:
            t.start()
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not failures:
                with lock:
                    n = len(committed)
                gen = compact.read_generation(archive.root)
                # go on until covered files were swept too (grace 1 s: a later compaction does it)
                if (
                    n >= 100
                    and checks[0] >= 20
                    and len(gen.batches) >= 3
                    and any(b.swept for b in gen.batches)
                ):
                    break
                time.sleep(0.2)
        finally:
            done.set()
            stop.touch()
            rec.wait(timeout=60)
            for t in threads:
                t.join(timeout=60)
        assert not failures, failures[:3]
        assert rec.returncode == 0
        assert len(committed) >= 100 and checks[0] >= 20
        gen = compact.read_generation(archive.root)
        assert len(gen.batches) >= 3  # several compactions ran while the recorder committed
        assert any(b.swept for b in gen.batches)  # and covered files were deleted meanwhile
        compact.compact(archive, grace=0)
        final = Archive.open(archive.root).read("runs")["run_id"]
        assert sorted(final) == sorted(committed)


class TestBackground:
    def test_a_recorder_starts_a_compaction_past_the_threshold(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv(compact.THRESHOLD_ENV, "10")
        archive, ids = _archive(tmp_path, 12)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not compact.read_generation(archive.root).batches:
            time.sleep(0.2)
        gen = compact.read_generation(archive.root)
        assert gen.batches, "no background compaction ran"
        with compact.compaction_lock(archive.root, wait=True):
            pass  # let it finish
        assert sorted(Archive.open(archive.root).read("runs")["run_id"]) == sorted(ids)
        assert any(Path(f).name.startswith(compact.PREFIX) for f in archive.files("runs"))

    def test_off_by_default_and_a_bad_value_is_off(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.delenv(compact.THRESHOLD_ENV, raising=False)
        assert compact.threshold() == 0
        monkeypatch.setenv(compact.THRESHOLD_ENV, "many")
        assert compact.threshold() == 0
        archive, _ = _archive(tmp_path, 3)
        assert not (archive.root / compact.DIR).exists()


class TestCli:
    def test_compact_command(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        from cli.main import app

        archive, _ = _archive(tmp_path, 3)
        code = invoke(app, "evalb", ["archive", "compact", "--archive", str(archive.root), "--grace", "0"])
        out = capsys.readouterr()
        assert code == 0, out.err
        assert "compacted 3 runs" in out.out
        assert len(archive.files("runs")) == 1
        code = invoke(app, "evalb", ["archive", "compact", "--archive", str(archive.root), "--grace", "-1"])
        assert code == 2 and capsys.readouterr().err.startswith("error: --grace must be 0 or more")

    def test_compact_refuses_a_non_archive(self, tmp_path: Path) -> None:
        from cli.main import app

        err = io.StringIO()
        code = invoke(app, "evalb", ["archive", "compact", "--archive", str(tmp_path / "nope")], err)
        assert code == 2 and err.getvalue().startswith("error: ") and len(err.getvalue().splitlines()) == 1

    def test_manifest_is_json_with_a_format(self, tmp_path: Path) -> None:
        archive, _ = _archive(tmp_path, 1)
        compact.compact(archive, grace=0)
        data = json.loads(compact.manifest_path(archive.root).read_text())
        assert data["format"] == compact.FORMAT and data["version"] == compact.VERSION


class TestRecordedArchive:
    def test_scores_summary_and_report_are_the_same_after_compaction(
        self,
        stochastic_archive: Path,
        copy_archive,
        tmp_path: Path,  # type: ignore[no-untyped-def]
    ) -> None:
        """A real recorded, scored archive: rescoring, the summary and the report's runs read the
        same after compaction (with a judge pass cached in the compacted judgements)."""
        from analysis.checker import score_archive
        from analysis.judge import CommandJudge
        from analysis.report import load_report_scores, read_events
        from analysis.summary import summary_text
        from tests.conftest import SCRIPTED_JUDGE

        root = copy_archive(stochastic_archive)
        archive = Archive.open(root)
        cols = ["run_id", "verdict", "valid", "axis_a", "axis_b", "reasons"]
        before = score_archive(root, judge=CommandJudge(SCRIPTED_JUDGE), write=False, rescore=True)
        summary = summary_text(root)
        report_before, _ = load_report_scores(archive)
        events_before = read_events(root, sorted(report_before["run_id"]))
        slots = archive.committed_slots()

        rep = compact.compact(archive, grace=0)
        assert rep.runs == archive.read("runs").height and rep.folded["scores"] >= 1
        assert all(len(Archive.open(root).files(t)) == 1 for t in RUN_TABLES)

        after = score_archive(root, judge=CommandJudge(SCRIPTED_JUDGE), write=False, rescore=True)
        assert after.judge_calls == 0  # the judge answers come from the compacted judgements
        assert after.scores.select(cols).sort("run_id").equals(before.scores.select(cols).sort("run_id"))
        assert summary_text(root) == summary
        report_after, _ = load_report_scores(Archive.open(root))
        assert report_after.sort("run_id").equals(report_before.sort("run_id"))
        assert read_events(root, sorted(report_after["run_id"])).equals(events_before)
        assert Archive.open(root).committed_slots() == slots


@pytest.mark.client
class TestGridResume:
    def test_a_grid_resumes_on_a_compacted_archive(self, tmp_path: Path) -> None:
        """The real recorder on a compacted archive: filled slots (now in a batch) are skipped, a new
        rep is recorded beside the batch, and every run is seen once."""
        from tests.conftest import record_grid

        root = tmp_path / "a"
        first = record_grid(root, ["R1"], ["scripted:oracle"], 2)
        assert len(first.recorded) == 2
        compact.compact(Archive.open(root), grace=0)
        again = record_grid(root, ["R1"], ["scripted:oracle"], 3)
        assert (again.skipped, len(again.recorded)) == (2, 1)
        runs = Archive.open(root).read("runs")
        assert runs.height == 3 and runs["slot"].n_unique() == 3
        assert len(Archive.open(root).files("runs")) == 2  # the batch and the new run's file
