"""`evalb archive merge`: union of archives, deduplicated by run id, slot conflicts reported (never
silently kept), checks before any write, and a rerun after a killed merge finishing the job."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from cli.app import invoke
from cli.main import app
from evalb import compact
from evalb.archive import Archive
from evalb.errors import UsageError
from evalb.merge import merge
from tests.core.test_compact_helpers import MANIFEST, commit, judgement_rows, score_rows

REPO = Path(__file__).resolve().parents[2]
TABLES = ("runs", "events", "artifacts", "judgements", "scores")


def _new(root: Path) -> Archive:
    a = Archive(root)
    a.ensure()
    return a


def _tables(root: Path) -> dict[str, pl.DataFrame]:
    a = Archive.open(root)
    return {t: a.read(t).sort(pl.all()) for t in TABLES}


def _same(a: Path, b: Path) -> bool:
    ta, tb = _tables(a), _tables(b)
    return all(ta[t].equals(tb[t]) for t in TABLES)


def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = invoke(app, "evalb", ["archive", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def two(tmp_path: Path) -> tuple[Path, Path, list[str], list[str]]:
    """Two shards: disjoint slots, scored and judged; the second one compacted."""
    a, b = _new(tmp_path / "a"), _new(tmp_path / "b")
    ia = [commit(a, rep=i) for i in range(0, 4)]
    ib = [commit(b, rep=i) for i in range(4, 8)]
    a.append_rows("scores", score_rows(ia))
    a.append_rows("judgements", judgement_rows(ia))
    b.append_rows("scores", score_rows(ib))
    compact.compact(b, grace=0)
    return a.root, b.root, ia, ib


class TestUnion:
    def test_union_of_shards_and_a_rerun_changes_nothing(self, two, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
        a, b, ia, ib = two
        dest = tmp_path / "dest"
        rep = merge([a, b], dest)
        assert rep.ok and rep.added_runs == 8 and rep.added_rows == {"judgements": 4, "scores": 8}
        d = Archive.open(dest)
        assert sorted(d.read("runs")["run_id"]) == sorted(ia + ib)
        for t in ("events", "artifacts"):
            assert set(d.read(t)["run_id"]) == set(ia + ib)
        for src in (a, b):  # every row of each source is in DEST, unchanged
            s = Archive.open(src)
            for t in ("runs", "events", "artifacts"):
                got = d.read(t).join(s.read(t).select("run_id").unique(), on="run_id").sort(pl.all())
                assert got.equals(s.read(t).sort(pl.all())), t
        before = _tables(dest)
        again = merge([a, b], dest)
        assert again.ok and again.added_runs == 0 and again.present_runs == 8
        assert again.added_rows == {"judgements": 0, "scores": 0}
        after = _tables(dest)
        assert all(after[t].equals(before[t]) for t in TABLES)
        assert len(d.files("runs")) == 2  # one published batch per source

    def test_into_a_compacted_dest_the_rerun_adds_nothing(self, two, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
        a, b, ia, ib = two
        dest = tmp_path / "dest"
        merge([a], dest)
        compact.compact(Archive.open(dest), grace=0)
        rep = merge([a, b], dest)
        assert rep.ok and rep.added_runs == 4 and rep.present_runs == 4
        before = _tables(dest)
        assert sorted(before["runs"]["run_id"]) == sorted(ia + ib)
        again = merge([a, b], dest)
        assert again.added_runs == 0 and again.added_rows == {"judgements": 0, "scores": 0}
        after = _tables(dest)
        assert all(after[t].equals(before[t]) for t in TABLES)

    def test_the_same_runs_in_two_archives_are_written_once(self, two, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
        a, _, _, _ = two
        copy = tmp_path / "a-copy"
        shutil.copytree(a, copy)
        rep = merge([a, copy], tmp_path / "dest")
        assert rep.ok and rep.added_runs == 4 and not rep.conflicts
        assert Archive.open(tmp_path / "dest").read("runs").height == 4
        assert Archive.open(tmp_path / "dest").read("scores").height == 4

    def test_unfilled_attempts_and_retries_are_no_conflict(self, tmp_path: Path) -> None:
        a, b = _new(tmp_path / "a"), _new(tmp_path / "b")
        commit(a, rep=0, outcome="timeout", attempt=1)
        commit(a, rep=0, outcome="completed", attempt=2)  # a retry in one archive: both kept
        commit(b, rep=0, outcome="interrupted")  # does not fill the slot
        commit(b, rep=0, outcome="harness_error")
        rep = merge([a.root, b.root], tmp_path / "dest")
        assert rep.ok and not rep.conflicts and rep.added_runs == 4


class TestConflicts:
    def _conflict(self, tmp_path: Path) -> tuple[Path, Path, str, str, str]:
        a, b = _new(tmp_path / "a"), _new(tmp_path / "b")
        ra = commit(a, rep=0)
        rb = commit(b, rep=0)  # the same slot recorded twice (a shard retried elsewhere)
        other = commit(b, rep=1)
        a.append_rows("scores", score_rows([ra]))
        b.append_rows("scores", score_rows([rb, other]))
        return a.root, b.root, ra, rb, other

    def test_reported_and_not_written(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        a, b, ra, rb, other = self._conflict(tmp_path)
        dest = tmp_path / "dest"
        code, out, err = _cli(["merge", str(a), str(b), str(dest)], capsys)
        assert code == 1
        slot = f"R1|scripted:oracle|{'p' * 16}|0"
        assert f"slot {slot}" in out and ra in out and rb in out and "not written" in out
        assert err.startswith("error: 1 conflicting") and "--keep" in err
        d = Archive.open(dest)
        assert d.read("runs")["run_id"].to_list() == [other]  # the rest is merged
        assert d.read("scores")["run_id"].to_list() == [other]
        assert ra not in set(d.read("events")["run_id"]) and rb not in set(d.read("events")["run_id"])
        # rerunning reports the same conflict again: nothing is silently chosen
        code, out2, _ = _cli(["merge", str(a), str(b), str(dest)], capsys)
        assert code == 1 and ra in out2

    @pytest.mark.parametrize("keep", ["first", "last", "both"])
    def test_keep_chooses_and_is_idempotent(self, tmp_path: Path, keep: str) -> None:
        a, b, ra, rb, other = self._conflict(tmp_path)
        dest = tmp_path / "dest"
        rep = merge([a, b], dest, keep=keep)
        assert rep.ok and len(rep.conflicts) == 1
        want = {"first": {ra}, "last": {rb}, "both": {ra, rb}}[keep] | {other}
        assert set(Archive.open(dest).read("runs")["run_id"]) == want
        assert set(Archive.open(dest).read("scores")["run_id"]) == want
        before = _tables(dest)
        again = merge([a, b], dest, keep=keep)
        assert again.ok and again.added_runs == 0
        after = _tables(dest)
        assert all(after[t].equals(before[t]) for t in TABLES)

    def test_keep_last_never_removes_a_run_already_in_dest(self, tmp_path: Path) -> None:
        a, b, _, rb, _ = self._conflict(tmp_path)
        dest = tmp_path / "dest"
        merge([a], dest)
        rep = merge([b], dest, keep="last")
        assert not rep.ok and rep.conflicts[0].kept is None
        assert rb not in set(Archive.open(dest).read("runs")["run_id"])

    def test_one_run_id_with_different_rows(self, tmp_path: Path) -> None:
        a, b = _new(tmp_path / "a"), _new(tmp_path / "b")
        rid = commit(a, rep=0)
        commit(b, rep=0, run_id=rid, n_events=5)  # same id, other content
        rep = merge([a.root, b.root], tmp_path / "dest")
        assert not rep.ok and rep.differing == [(rid, [str(a.root), str(b.root)])]
        assert "differs between" in rep.text()


class TestChecks:
    def test_an_older_schema_is_refused_with_the_fix(
        self, two, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:  # type: ignore[no-untyped-def]
        a, b, _, _ = two
        marker = json.loads((b / "archive.json").read_text())
        (b / "archive.json").write_text(
            json.dumps({**marker, "schema_version": marker["schema_version"] - 1})
        )
        dest = tmp_path / "dest"
        code, _, err = _cli(["merge", str(a), str(b), str(dest)], capsys)
        assert code == 2 and "migrate it first: evalb-record migrate" in err and str(b) in err
        assert len(err.splitlines()) == 1
        assert not dest.exists()  # nothing written

    def test_different_frozen_parts_are_refused_naming_the_part(self, tmp_path: Path) -> None:
        a, b = _new(tmp_path / "a"), _new(tmp_path / "b")
        commit(a, rep=0)
        commit(b, rep=1, manifest={**MANIFEST, "fixture": "0" * 64, "scenario:R1": "9" * 64})
        with pytest.raises(UsageError, match=r"different frozen parts \(fixture, scenario:R1\)"):
            merge([a.root, b.root], tmp_path / "dest")
        assert not (tmp_path / "dest").exists()

    def test_arms_differing_only_by_plugin_merge(self, tmp_path: Path) -> None:
        a, b = _new(tmp_path / "a"), _new(tmp_path / "b")
        commit(a, rep=0)
        commit(b, rep=0, slot=f"R1|scripted:oracle|{'q' * 16}|0", manifest={**MANIFEST, "plugin": "q" * 64})
        rep = merge([a.root, b.root], tmp_path / "dest")
        assert rep.ok and rep.added_runs == 2

    def test_bad_arguments(self, two, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
        a, _, _, _ = two
        code, _, err = _cli(["merge", str(a)], capsys)
        assert code == 2 and err.startswith("error: name one or more source")
        code, _, err = _cli(["merge", str(a), str(a)], capsys)
        assert code == 2 and "both a source and the destination" in err
        foreign = tmp_path / "foreign"
        foreign.mkdir()
        (foreign / "notes.txt").write_text("mine")
        code, _, err = _cli(["merge", str(a), str(foreign)], capsys)
        assert code == 2 and "not an evalb archive" in err
        code, _, err = _cli(["merge", str(tmp_path / "nope"), str(tmp_path / "d2")], capsys)
        assert code == 2 and "nope" in err
        code, _, err = _cli(["merge", "--keep", "middle", str(a), str(tmp_path / "d3")], capsys)
        assert code == 2 and "--keep must be one of" in err


class TestKilled:
    def test_a_merge_killed_midway_then_rerun_equals_a_clean_merge(self, tmp_path: Path) -> None:
        a, b = _new(tmp_path / "a"), _new(tmp_path / "b")
        ids = [commit(a, rep=i, n_events=20) for i in range(150)]
        ids += [commit(b, rep=1000 + i, n_events=20) for i in range(150)]
        a.append_rows("scores", score_rows(ids[:150]))
        compact.compact(b, grace=0)
        clean = tmp_path / "clean"
        merge([a.root, b.root], clean)

        dest = tmp_path / "dest"
        code = (
            f"import sys; sys.path.insert(0, {str(REPO)!r}); from evalb.merge import merge; "
            f"merge({[str(a.root), str(b.root)]!r}, {str(dest)!r}, chunk_runs=25)"
        )
        proc = subprocess.Popen([sys.executable, "-c", code])
        n = 0
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if (dest / "compaction" / "manifest.json").exists():
                n = len(compact.read_generation(dest).batches)
            if n >= 2 or proc.poll() is not None:
                break
            time.sleep(0.002)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        partial = Archive.open(dest)  # a valid archive at the kill: only whole batches are in it
        committed = set(partial.read("runs")["run_id"])
        assert 25 <= len(committed) < 300, f"the merge was not killed mid-way ({len(committed)} runs)"
        assert committed <= set(ids)
        assert set(partial.read("events")["run_id"]) == committed

        rep = merge([a.root, b.root], dest)
        assert rep.ok and rep.present_runs == len(committed)
        assert _same(dest, clean)
