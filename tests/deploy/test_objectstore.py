"""Archives on S3 object storage, against a real S3-compatible server on loopback (moto_server):
push, read back through the cache mirror, reruns, concurrent pushers, a push stopped half way."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path

import polars as pl
import pytest

from analysis.summary import summary_text
from evalb import objectstore
from evalb.archive import Archive
from evalb.errors import ArchiveError, NotAnArchiveError
from tests.cli.helpers import call
from tests.deploy.s3server import S3Server, child_env, golden_archive, widened_archive

EVALB = Path(".venv/bin/evalb").resolve()
EVALB_SCORE = Path(".venv/bin/evalb-score").resolve()
PUSH = ["archive", "push"]
PULL = ["archive", "pull"]


def run(server: S3Server, *args: object, exe: Path = EVALB) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(exe), *map(str, args)], capture_output=True, text=True, timeout=300, env=child_env(server)
    )


def table_rows(root: Path, table: str) -> pl.DataFrame:
    return Archive.open(root).read(table).sort(pl.all())


def keys(server: S3Server, bucket: str, prefix: str) -> list[str]:
    return sorted(objectstore.iter_keys(server.client(), objectstore.S3Url(bucket, prefix)))


def test_round_trip_summary_equals_local_and_rerun_uploads_nothing(s3: S3Server, tmp_path: Path) -> None:
    local = golden_archive(tmp_path / "local")
    bucket = s3.bucket("round-trip")
    out = run(s3, *PUSH, local, f"s3://{bucket}/study/a")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("pushed 8 object(s)"), out.stdout  # 2 runs × 3 files + 2 scores files
    stored = keys(s3, bucket, "study/a")
    assert "archive.json" in stored
    on_disk = sorted(
        str(p.relative_to(local))
        for t in ("runs", "events", "artifacts", "scores")
        for p in (local / t).glob("*.parquet")
    )
    assert [k for k in stored if k != "archive.json"] == on_disk

    remote = run(s3, "summary", "--archive", f"s3://{bucket}/study/a")
    assert remote.returncode == 0, remote.stderr
    assert remote.stdout == summary_text(local)
    assert "R2" in remote.stdout

    page = tmp_path / "report.html"
    assert call("evalb", "report", "--archive", f"s3://{bucket}/study/a", "--out", page).code == 0
    assert page.stat().st_size > 1000

    again = run(s3, *PUSH, local, f"s3://{bucket}/study/a")
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("pushed 0 object(s)") and f"{len(on_disk)} already there" in again.stdout

    # the mirror is incremental: a second read fetches nothing new
    res = objectstore.mirror(f"s3://{bucket}/study/a")
    assert (res.fetched, res.cached) == (0, len(on_disk))
    for table in ("runs", "events", "artifacts", "scores"):
        assert table_rows(res.root, table).equals(table_rows(local, table)), table


def test_score_reads_s3_without_writing(s3: S3Server, tmp_path: Path) -> None:
    local = golden_archive(tmp_path / "local")
    bucket = s3.bucket("score-read")
    objectstore.push(local, f"s3://{bucket}/x")
    here = run(s3, "--tsv", "--no-write", "--archive", local, exe=EVALB_SCORE)
    there = run(s3, "--tsv", "--no-write", "--archive", f"s3://{bucket}/x", exe=EVALB_SCORE)
    assert (
        there.returncode == here.returncode and there.stdout == here.stdout and here.stdout.count("\n") == 2
    )
    refused = run(s3, "--archive", f"s3://{bucket}/x", exe=EVALB_SCORE)
    assert refused.returncode == 2
    assert (
        refused.stderr.startswith("error: cannot write scores to s3://score-read/x")
        and "--no-write" in refused.stderr
    )
    assert refused.stderr.count("\n") == 1


def _shard(src: Path, dest: Path, keep: str) -> Path:
    """A copy of `src` holding one of its runs (and all its scores files)."""
    shutil.copytree(src, dest)
    for table in ("runs", "events", "artifacts"):
        for p in (dest / table).glob("*.parquet"):
            if p.stem != keep:
                p.unlink()
    return dest


def test_two_shards_push_into_one_prefix_at_once(s3: S3Server, tmp_path: Path) -> None:
    full = golden_archive(tmp_path / "full")
    ids = sorted(p.stem for p in (full / "runs").glob("*.parquet"))
    assert len(ids) == 2
    shards = [_shard(full, tmp_path / f"shard{i}", rid) for i, rid in enumerate(ids)]
    bucket = s3.bucket("two-shards")
    url = f"s3://{bucket}/grid"
    procs = [
        subprocess.Popen(
            [str(EVALB), *PUSH, str(sh), url, "--jobs", "2"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(s3),
        )
        for sh in shards
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert run(s3, "summary", "--archive", url).stdout == summary_text(full)
    # the scores files both shards hold went up once: the second pusher found the same bytes there
    stored = keys(s3, bucket, "grid")
    assert len(stored) == 1 + 3 * 2 + len(list((full / "scores").glob("*.parquet")))


def test_push_stopped_after_any_upload_leaves_no_half_visible_run(s3: S3Server, tmp_path: Path) -> None:
    local = golden_archive(tmp_path / "local")
    total = sum(len(w) for w in objectstore.push_plan(local))
    bucket = s3.bucket("stopped")
    full_runs = table_rows(local, "runs")

    class Stop(Exception):
        pass

    for k in range(total):
        url = f"s3://{bucket}/k{k}"
        count = 0

        def stop_after(_key: str, k: int = k) -> None:
            nonlocal count
            count += 1
            if count > k:
                raise Stop

        with pytest.raises(Stop):
            objectstore.push(local, url, jobs=1, after_upload=stop_after)
        seen = objectstore.mirror(url, tmp_path / f"mirror{k}")
        runs = {p.stem for p in (seen.root / "runs").glob("*.parquet")}
        for table in ("events", "artifacts"):
            # every run a reader sees is whole; nothing of an uncommitted run is fetched
            assert {p.stem for p in (seen.root / table).glob("*.parquet")} == runs, (k, table)
        if runs:
            rows = Archive.open(seen.root).read("runs")
            assert rows.height == len(runs)
        objectstore.push(local, url)  # the rerun finishes the job
        assert table_rows(objectstore.mirror(url, tmp_path / f"mirror{k}").root, "runs").equals(full_runs)
    assert total == 8


def test_conflicting_object_is_refused_never_overwritten(s3: S3Server, tmp_path: Path) -> None:
    local = golden_archive(tmp_path / "local")
    bucket = s3.bucket("conflict")
    rid = sorted(p.stem for p in (local / "runs").glob("*.parquet"))[0]
    s3.client().put_object(Bucket=bucket, Key=f"p/events/{rid}.parquet", Body=b"other bytes")
    out = run(s3, *PUSH, local, f"s3://{bucket}/p")
    assert out.returncode == 2
    assert out.stderr.startswith(
        f"error: s3://{bucket}/p already holds events/{rid}.parquet with other content"
    )
    body = s3.client().get_object(Bucket=bucket, Key=f"p/events/{rid}.parquet")["Body"].read()
    assert body == b"other bytes"
    assert not [k for k in keys(s3, bucket, "p") if k.startswith("runs/")]  # no run was committed


def test_schema_mismatch_and_missing_archive_are_one_line_errors(s3: S3Server, tmp_path: Path) -> None:
    local = golden_archive(tmp_path / "local")
    bucket = s3.bucket("errors")
    s3.client().put_object(
        Bucket=bucket, Key="old/archive.json", Body=b'{"format": "evalb-archive", "schema_version": 1}'
    )
    with pytest.raises(ArchiveError, match="schema v1, the local one is v"):
        objectstore.push(local, f"s3://{bucket}/old")
    with pytest.raises(NotAnArchiveError, match=r"no archive\.json"):
        Archive.open(f"s3://{bucket}/empty")
    with pytest.raises(ArchiveError, match="cannot record into s3://errors/x"):
        Archive.open(f"s3://{bucket}/x", writable=True)
    cases = [
        (("summary", "--archive", f"s3://{bucket}/empty"), "is not an evalb archive (no archive.json)"),
        (
            ("summary", "--archive", f"s3://{bucket}/old"),
            f"s3://{bucket}/old has archive schema v1; this evalb",
        ),
        (("summary", "--archive", "s3://no-such-bucket/p"), "no bucket 'no-such-bucket'"),
        (("summary", "--archive", "s3://B_D/p"), "is not a valid S3 archive address"),
        ((*PUSH, local, f"/{bucket}/p"), "is not an s3:// address"),
        ((*PUSH, tmp_path / "nothing", f"s3://{bucket}/p"), "is not an evalb archive"),
    ]
    for args, msg in cases:  # in-process through the CLI's error boundary (the env is this process's)
        res = call("evalb", *args)
        assert res.code == 2, (args, res.err)
        assert len(res.lines) == 1 and res.lines[0].startswith("error: ") and msg in res.err, res.err


def test_no_credentials_is_a_one_line_error(s3: S3Server, tmp_path: Path) -> None:
    local = golden_archive(tmp_path / "local")
    env = {k: v for k, v in child_env(s3).items() if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    env["HOME"] = str(tmp_path)  # no ~/.aws
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    out = subprocess.run(
        [str(EVALB), *PUSH, str(local), "s3://any-bucket/p"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert out.returncode == 2 and "no AWS credentials" in out.stderr and out.stderr.count("\n") == 1, (
        out.stderr
    )


def test_pull_gives_a_local_archive_to_resume_into(s3: S3Server, tmp_path: Path) -> None:
    local = golden_archive(tmp_path / "local")
    bucket = s3.bucket("pull")
    objectstore.push(local, f"s3://{bucket}/s")
    dest = tmp_path / "resumed"
    out = run(s3, *PULL, f"s3://{bucket}/s", dest)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("pulled 8 object(s)")
    arch = Archive.open(dest, writable=True)  # a recorder can write into it
    assert arch.committed_slots() == Archive.open(local).committed_slots() != {}
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("x")
    out = run(s3, *PULL, f"s3://{bucket}/s", foreign)
    assert out.returncode == 2 and "is not an evalb archive and not empty" in out.stderr


def test_push_killed_mid_way_leaves_no_half_visible_run(s3: S3Server, tmp_path: Path) -> None:
    """SIGKILL a real push process while it uploads: readers see only whole runs; the rerun finishes."""
    local = widened_archive(tmp_path / "local", copies=40)  # 82 runs, 246 run files
    waves = objectstore.push_plan(local)
    total, first = sum(len(w) for w in waves), len(waves[0])  # 248 files; 164 artifacts and events
    bucket = s3.bucket("killed")
    url = objectstore.S3Url(bucket, "k")
    proc = subprocess.Popen(
        [str(EVALB), *PUSH, str(local), str(url), "--jobs", "1"],
        env=child_env(s3),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:  # kill it once it is part way through the runs files
            if len(keys(s3, bucket, "k")) > 1 + first + 5:  # archive.json, wave 1, 5 runs files
                break
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    uploaded = keys(s3, bucket, "k")
    assert proc.returncode == -signal.SIGKILL and 1 < len(uploaded) < total + 1, len(uploaded)
    seen = objectstore.mirror(str(url), tmp_path / "seen").root
    runs = {p.stem for p in (seen / "runs").glob("*.parquet")}
    assert 0 < len(runs) < 82
    for table in ("events", "artifacts"):
        assert {p.stem for p in (seen / table).glob("*.parquet")} == runs, table
    assert Archive.open(seen).read("runs").height == len(runs)
    out = run(s3, *PUSH, local, url)
    assert out.returncode == 0, out.stderr
    assert table_rows(objectstore.mirror(str(url), tmp_path / "seen").root, "runs").equals(
        table_rows(local, "runs")
    )


def test_a_compacted_archive_round_trips(s3: S3Server, tmp_path: Path) -> None:
    """A compacted archive (what `evalb archive merge` writes) pushes its live batches and then its
    compaction folder, manifest last; the mirror reads it back equal, covered small files aside."""
    from evalb.compact import compact

    local = widened_archive(tmp_path / "local", 3)
    before = {t: table_rows(local, t) for t in ("runs", "events", "artifacts", "scores")}
    compact(Archive.open(local), grace=0)
    assert (local / "compaction" / "manifest.json").is_file()
    bucket = s3.bucket("compacted")
    out = run(s3, *PUSH, local, f"s3://{bucket}/c")
    assert out.returncode == 0, out.stderr
    stored = keys(s3, bucket, "c")
    assert "compaction/manifest.json" in stored
    assert any(k.startswith("runs/compacted-") for k in stored)
    seen = objectstore.mirror(f"s3://{bucket}/c", tmp_path / "seen").root
    for table, rows in before.items():
        assert table_rows(seen, table).equals(rows), table
    assert run(s3, "summary", "--archive", f"s3://{bucket}/c").stdout == summary_text(local)
    again = run(s3, *PUSH, local, f"s3://{bucket}/c")
    assert again.returncode == 0 and again.stdout.startswith("pushed 0 object(s)"), again.stdout


def test_push_plan_stays_whole_while_a_recorder_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run committed while push lists the archive is pushed whole or not at all (never its runs
    file without its events), and no scores file is pushed before the runs it scores."""
    local = golden_archive(tmp_path / "local")
    spare = widened_archive(tmp_path / "spare", copies=1)
    new = sorted(
        {p.stem for p in (spare / "runs").glob("*.parquet")}
        - {p.stem for p in (local / "runs").glob("*.parquet")}
    )
    assert len(new) == 2
    real = Archive.files

    def files(self: Archive, table: str) -> list[str]:
        out = real(self, table)
        if new and table in ("runs", "artifacts"):  # a recorder commits a run after these listings
            rid = new.pop()
            for t in ("artifacts", "events", "runs"):
                shutil.copy(spare / t / f"{rid}.parquet", local / t / f"{rid}.parquet")
        return out

    monkeypatch.setattr(Archive, "files", files)
    events, runs, pooled = objectstore.push_plan(local)
    pushed = {p.stem for p in runs}
    assert {p.stem for p in events if p.parent.name == "events"} == pushed
    assert {p.stem for p in events if p.parent.name == "artifacts"} == pushed
    assert len(pushed) == 2  # runs committed after the runs listing wait for the next push
    assert len(list((local / "runs").glob("*.parquet"))) == 4
    assert [p.parent.name for p in pooled] == ["scores", "scores"]
