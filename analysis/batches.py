"""Scoring in bounded memory: the runs in scope go through the rules batch by batch.

Every rule is per run, so a pass can read and score `BATCH_RUNS` runs at a time: only one
batch's events and artifacts are ever in memory. The runs are taken in run_id order, so a batch
is a contiguous run_id range: a compacted file (sorted by run_id, row-grouped) gives up only the
row groups of that range, and a per-run file (`<table>/<run_id>.parquet`, as `Archive.commit_run`
writes it) is opened only by the batch of its run. Files come from `Archive.files`, never a glob.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import polars as pl
import pyarrow.parquet as pq

from evalb.archive import Archive, _os_error
from evalb.schema import polars_schema, to_frame

#: Runs per batch: a batch's events and artifacts take ~40 KB a run (~40 MB), reading it ~300 MB.
BATCH_RUNS = 1000
_FILE = "_evalb_file"
_FILES_PER_SCAN = 2000


def scan_files(files: Sequence[str]) -> pl.LazyFrame:
    """A lazy scan of some files of one table, read as `Archive.scan` reads them all."""
    return pl.scan_parquet(list(files), missing_columns="insert", extra_columns="ignore", glob=False)


@dataclass
class RunFiles:
    """Where each run's rows are: its own file per table, or the shared (compacted) files."""

    per_run: dict[str, dict[str, str]]
    """table -> run_id -> the run's own file."""
    shared: dict[str, list[str]]
    """table -> files that are not one run's own (compacted files; orphans of a failed commit)."""

    def files(self, table: str, ids: Sequence[str]) -> list[str]:
        own = self.per_run[table]
        return [own[i] for i in ids if i in own] + self.shared[table]


def read_runs(
    archive: Archive, columns: Sequence[str], tables: Sequence[str]
) -> tuple[pl.LazyFrame, RunFiles]:
    """The runs table (a lazy frame of `columns`, scope filters still to apply) and where the rows
    of each run are in `tables`. A run whose runs row is in `runs/<run_id>.parquet` was committed
    on its own, so its other rows are in `<table>/<run_id>.parquet`; every other file is shared."""
    files = archive.files("runs")
    if not files:
        empty = to_frame("runs", []).lazy().select(columns)
        return empty, RunFiles({t: {} for t in tables}, {t: [] for t in tables})
    # A few thousand files per scan: one scan over 100,000 small files keeps ~10 KB a file (1 GB)
    # until it ends; chunks keep that bounded.
    runs = pl.concat(
        [
            pl.scan_parquet(
                files[i : i + _FILES_PER_SCAN],
                missing_columns="insert",
                extra_columns="ignore",
                glob=False,
                include_file_paths=_FILE,
            )
            .select(*columns, _FILE)
            .collect()
            for i in range(0, len(files), _FILES_PER_SCAN)
        ],
        how="vertical_relaxed",
    )
    own = runs.filter(pl.col(_FILE).str.split("/").list.last() == pl.col("run_id") + ".parquet")
    return runs.drop(_FILE).lazy(), files_of(archive, own["run_id"].to_list(), tables)


def files_of(archive: Archive, run_ids: Sequence[str], tables: Sequence[str]) -> RunFiles:
    """Where the rows of `run_ids` are in `tables`, without reading the runs table: a file named
    `<run_id>.parquet` for one of them is that run's own; every other file is shared. (Cheaper than
    `read_runs` when the ids are known; other runs' own files are then scanned as shared.)"""
    wanted = set(run_ids)
    per_run: dict[str, dict[str, str]] = {}
    shared: dict[str, list[str]] = {}
    for t in tables:
        per_run[t], shared[t] = {}, []
        for f in archive.files(t):
            stem = os.path.basename(f)[: -len(".parquet")]
            if stem in wanted:
                per_run[t][stem] = f
            else:
                shared[t].append(f)
    return RunFiles(per_run, shared)


def batches(runs: pl.DataFrame, size: int | None = None) -> Iterator[pl.DataFrame]:
    """`runs` in run_id order, `size` (default BATCH_RUNS) rows at a time."""
    size = size or BATCH_RUNS
    runs = runs.sort("run_id")
    for start in range(0, runs.height, size):
        yield runs.slice(start, size)


def batch_scan(where: RunFiles, table: str, ids: list[str]) -> pl.LazyFrame | None:
    """The rows of `table` for the runs `ids` (sorted), or None when no file holds any."""
    files = where.files(table, ids)
    if not files:
        return None
    lf = scan_files(files)
    if where.shared[table]:  # row groups outside the batch's run_id range are skipped
        lf = lf.filter(
            pl.col("run_id").is_between(pl.lit(ids[0]), pl.lit(ids[-1])) & pl.col("run_id").is_in(ids)
        )
    return lf


class ParquetStream:
    """One Parquet file written a row group at a time (one per batch), under a hidden temp name
    renamed into place on success (as `evalb.archive.write_parquet_atomic`), removed on failure."""

    def __init__(self, dest: Path, table: str) -> None:
        self.dest = dest
        self.table = table
        self.schema = polars_schema(table)
        self.tmp = dest.with_name(f".{dest.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
        self.writer: pq.ParquetWriter | None = None
        self.rows = 0

    def write(self, frame: pl.DataFrame) -> None:
        if not frame.height:
            return
        table = frame.select(list(self.schema)).cast(self.schema).to_arrow()
        try:
            if self.writer is None:
                self.dest.parent.mkdir(parents=True, exist_ok=True)
                self.writer = pq.ParquetWriter(self.tmp, table.schema, compression="zstd")
            self.writer.write_table(table)
        except OSError as e:
            raise _os_error("write", self.dest, e) from e
        self.rows += frame.height

    def __enter__(self) -> ParquetStream:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.writer is None:
            return
        self.writer.close()
        if kind is not None:
            with contextlib.suppress(OSError):
                self.tmp.unlink()
            return
        try:
            with open(self.tmp, "rb+") as fh:
                os.fsync(fh.fileno())
            os.replace(self.tmp, self.dest)
        except OSError as e:
            with contextlib.suppress(OSError):
                self.tmp.unlink()
            raise _os_error("write", self.dest, e) from e

    @property
    def written(self) -> Path | None:
        """The file, once renamed into place (None when no row was written)."""
        return self.dest if self.writer is not None and self.dest.exists() else None
