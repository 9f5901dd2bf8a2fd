"""Committing imported runs in batches, in a thread beside the parsing, with the archive's protocol.

Layout and protocol are the archive's (docs/archive.md): one Parquet file per run per table, each
written under a hidden temp name (`.<name>.<pid>-<random>.tmp`, swept if the writer dies) and
renamed into place, the runs file last as the commit marker, and nothing renamed before its bytes
are on disk. What a batch changes is only when `fsync` runs: the artifacts and events files of
every run in the batch are written, synced and renamed, their folders synced once, then the runs
files likewise; so a crash leaves each run committed whole or not at all (an events file without
its runs row is no run), for a fraction of the syncs.
"""

from __future__ import annotations

import contextlib
import io
import os
import queue
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from evalb.archive import Archive
from evalb.errors import ArchiveError

if TYPE_CHECKING:
    import polars as pl

    from runner.importer import Prepared

_STOP = object()
#: Threads writing a batch's files (2 cores here; more only adds contention).
WRITERS = 2
_POOL: ThreadPoolExecutor | None = None
#: A batch is committed once its transcripts add up to this many bytes.
BATCH_BYTES = 64 << 20


def _os_error(path: Path, e: OSError) -> ArchiveError:
    import errno

    if e.errno == errno.ENOSPC:
        return ArchiveError(f"cannot write {path}: the disk is full", hint="free space and rerun")
    return ArchiveError(f"cannot write {path}: {e.strerror}")


def _tmp_name(dest: Path) -> Path:
    return dest.with_name(f".{dest.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")


def _fsync(path: Path, flags: int = os.O_RDONLY) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _Writer:
    """Temp files written for one batch, then synced and renamed into place together."""

    def __init__(self, pool: ThreadPoolExecutor) -> None:
        self.pool = pool
        self.pending: list[tuple[Path, Path]] = []  # (tmp, dest)
        self.placed: list[Path] = []

    def write(self, frame: pl.DataFrame | bytes, dest: Path) -> None:
        tmp = _tmp_name(dest)
        self.pending.append((tmp, dest))
        try:
            if isinstance(frame, bytes):
                tmp.write_bytes(frame)
            else:
                frame.write_parquet(tmp, compression="zstd", statistics=True)
        except OSError as e:
            raise _os_error(dest, e) from e

    def place(self) -> None:
        """fsync every temp file, rename each into place, fsync their folders once each."""
        try:
            list(self.pool.map(_fsync, [tmp for tmp, _ in self.pending]))
            for tmp, dest in self.pending:
                os.replace(tmp, dest)
                self.placed.append(dest)
            for d in sorted({dest.parent for _, dest in self.pending}):
                with contextlib.suppress(OSError):
                    _fsync(d)
        except OSError as e:
            raise _os_error(self.pending[0][1], e) from e
        self.pending = []

    def discard(self, placed: bool) -> None:
        for tmp, _ in self.pending:
            with contextlib.suppress(OSError):
                tmp.unlink()
        if placed:
            for dest in self.placed:
                with contextlib.suppress(OSError):
                    dest.unlink()


_EMPTY_ARTIFACTS: bytes | None = None


def _empty_artifacts() -> bytes:
    """The bytes of an artifacts file without rows (the same for every run: no run_id inside)."""
    global _EMPTY_ARTIFACTS
    if _EMPTY_ARTIFACTS is None:
        from evalb.schema import to_frame

        buf = io.BytesIO()
        to_frame("artifacts", []).write_parquet(buf, compression="zstd", statistics=True)
        _EMPTY_ARTIFACTS = buf.getvalue()
    return _EMPTY_ARTIFACTS


def _pool() -> ThreadPoolExecutor:
    """Threads that write and sync a batch's files: Parquet encoding and fsync release the GIL,
    so a batch's files are written side by side (and ext4 merges the syncs' journal commits)."""
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=WRITERS, thread_name_prefix="evalb-import-write")
    return _POOL


def commit_batch(archive: Archive, batch: list[Prepared]) -> list[str]:
    """Commit every run of `batch` (see the module docstring); on a failure no run of the batch is
    left half-committed (its files are removed again) and the error is raised. The run ids."""
    from evalb.schema import to_frame

    if not batch:
        return []
    pool = _pool()
    data, runs = _Writer(pool), _Writer(pool)

    def write_data(p: Prepared) -> None:
        name = f"{p.run.run_id}.parquet"
        arts = _empty_artifacts() if p.artifacts is None else p.artifacts
        data.write(arts, archive.table_dir("artifacts") / name)
        data.write(to_frame("events", p.events), archive.table_dir("events") / name)

    def write_run(p: Prepared) -> None:
        runs.write(to_frame("runs", [p.run]), archive.table_dir("runs") / f"{p.run.run_id}.parquet")

    try:
        list(pool.map(write_data, batch))
        data.place()
        list(pool.map(write_run, batch))
        runs.place()
    except BaseException:
        runs.discard(placed=False)  # a runs file placed is a run committed: keep it and its data
        committed = {Path(d).stem for d in runs.placed}
        data.placed = [d for d in data.placed if d.stem not in committed]
        data.discard(placed=True)
        raise
    return [p.run.run_id for p in batch]


def commit_one(archive: Archive, prepared: Prepared) -> None:
    """Commit one run (a batch of one)."""
    commit_batch(archive, [prepared])


class Committer(threading.Thread):
    """Commits prepared runs in batches of up to `batch`, in a thread: the caller parses the next
    transcripts meanwhile (writing Parquet and fsync release the GIL). A batch is committed when
    it holds `batch` runs or `batch_bytes` of transcript, or when no run is waiting; with the
    queue's 4 that bounds the transcripts held in memory. An error stops it; `check` and `close` raise it."""

    def __init__(self, archive: Archive, *, batch: int = 32, batch_bytes: int = BATCH_BYTES) -> None:
        super().__init__(name="evalb-import-commit", daemon=True)
        self.archive = archive
        self.batch = max(1, batch)
        self.batch_bytes = batch_bytes
        self.queue: queue.Queue[object] = queue.Queue(maxsize=4)
        self.error: BaseException | None = None
        self.committed: list[str] = []  # run ids, as their runs files land

    def put(self, prepared: Prepared) -> None:
        while True:
            self.check()
            try:
                self.queue.put(prepared, timeout=0.2)
                return
            except queue.Full:
                continue

    def check(self) -> None:
        """Raise the committer's error, if it has stopped on one."""
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        """Commit what is queued, stop the thread, and raise its error if it had one."""
        if self.is_alive():
            while self.is_alive():
                try:
                    self.queue.put(_STOP, timeout=0.2)
                    break
                except queue.Full:
                    continue
            self.join()
        self.check()

    def run(self) -> None:
        batch: list[Prepared] = []
        size = 0
        try:
            while True:
                try:
                    item = self.queue.get(block=not batch)
                except queue.Empty:
                    item = None  # nothing waiting: commit what the batch holds
                if item is _STOP:
                    self.committed += commit_batch(self.archive, batch)
                    return
                if item is not None:
                    batch.append(item)  # type: ignore[arg-type]
                    size += item.nbytes  # type: ignore[attr-defined]
                if item is None or len(batch) >= self.batch or size >= self.batch_bytes:
                    self.committed += commit_batch(self.archive, batch)
                    batch, size = [], 0
        except BaseException as e:
            self.error = e
            # unblock a producer waiting on a full queue
            with contextlib.suppress(queue.Empty):
                while True:
                    self.queue.get_nowait()
