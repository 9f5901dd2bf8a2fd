"""The archive on disk: a directory of Parquet files per table, written crash-safely by many recorders.

Layout (documented in docs/archive.md)::

    ARCHIVE/archive.json                 format marker and schema version
    ARCHIVE/<table>/<id>.parquet         runs, events, artifacts: one file per run; judgements,
                                         scores: one file per scoring pass
    ARCHIVE/inflight/<run_id>.jsonl      stdout lines of a rep still running, appended as they arrive
    ARCHIVE/inflight/<run_id>.json       that rep's run row as known at its start
    ARCHIVE/locks/                       flock files: a live recorder holds its rep's and slot's lock
    ARCHIVE/quarantine/                  journals that could not be committed, each with a .reason
    ARCHIVE/<table>/compacted-*.parquet  many runs' rows folded by compaction (evalb/compact.py),
    ARCHIVE/compaction/manifest.json     live only once this manifest names them

Why this shape: Parquet files cannot be appended to, and two recorders must be able to write at
once. So each run is committed as its own files, each written to a hidden temp name and renamed
into place (atomic), the runs row last: a run without a runs row is not yet committed. A rep's
lines go to an append-only journal first, so a recorder killed at any moment loses nothing: the
next recorder (or `evalb-record recover`) finds journals whose lock nobody holds and commits them
as `interrupted`. A journal that cannot be committed (or a garbage file in inflight/) is moved to
quarantine/ with a one-line reason and one warning, so it never blocks later recorders. Readers
list a table's files with `Archive.files(table)` (compacted batches plus the small files they do
not cover); an archive never compacted needs no evalb code: `read_parquet('ARCHIVE/runs/*.parquet')`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import hashlib
import json
import os
import threading
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import polars as pl

from evalb import migrations
from evalb.errors import ArchiveError, NotAnArchiveError
from evalb.schema import SCHEMA_VERSION, TABLES, ArtifactRecord, EventRecord, Record, RunRecord, to_frame

FORMAT = "evalb-archive"
RUN_TABLES = ("artifacts", "events", "runs")  # commit order: runs last
#: Outcomes that do not fill a grid slot: a rerun records the rep again.
UNFILLED = ("interrupted", "harness_error")


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _os_error(action: str, path: Path, e: OSError) -> ArchiveError:
    if e.errno == errno.ENOSPC:
        return ArchiveError(f"cannot {action} {path}: the disk is full", hint="free space and rerun")
    if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return ArchiveError(
            f"cannot {action} {path}: {e.strerror}", hint="choose a writable --archive directory"
        )
    return ArchiveError(f"cannot {action} {path}: {e.strerror}")


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_parquet_atomic(frame: pl.DataFrame, dest: Path, *, row_group_size: int | None = None) -> None:
    """Write `frame` to `dest` via a hidden temp file and rename, so readers never see a partial file."""
    # The writer's pid is in the name, so that recovery can sweep what a killed writer left.
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    try:
        frame.write_parquet(tmp, compression="zstd", statistics=True, row_group_size=row_group_size)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, dest)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise _os_error("write", dest, e) from e
    except BaseException:  # a Ctrl-C mid-write leaves no temp file either
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_dir(dest.parent)


#: A recorder refuses to start with less free space than this in the archive's file system: a
#: rep's files are small (~0.1-1 MB), but a disk that fills mid-grid leaves nothing to gain.
MIN_FREE_BYTES = 16 * 1024 * 1024

#: Entries an archive directory may hold before its marker exists (a concurrent recorder is
#: creating it); anything else in a folder without archive.json makes it "not an archive".
_OWN_ENTRIES = frozenset({*TABLES, "inflight", "locks", "quarantine", "compaction"})

#: Columns of `latest_scores` taken from the runs table (after every ScoreRecord column).
LATEST_RUN_COLUMNS: tuple[str, ...] = (
    "model_id",
    "arm",
    "outcome",
    "started_at",
    "duration_ms",
    "cost_usd",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_creation_tokens",
    "num_turns",
    "client_version",
    "plugin_name",
    "plugin_version",
    "source",
)

if TYPE_CHECKING:
    from evalb.journal import InflightRun


def last_attempts(df: pl.DataFrame) -> pl.DataFrame:
    """The rows of `df` (with slot and attempt columns) that count: the last attempt of each grid
    slot. A rep retried at once (client_error or timeout before the model spoke) leaves attempts
    1..n in the archive; only attempt n is the slot's run. Rows sharing a slot's highest attempt
    (fabricated runs reuse a slot name) and rows without a slot are all kept; so is the order."""
    if df.is_empty():
        return df
    last = pl.col("attempt").max().over("slot")
    return df.filter(pl.col("slot").is_null() | (pl.col("attempt") == last))


class Archive:
    """An evalb archive directory: open or create it (validated once), read its tables, commit runs.

    `Archive.open(path)` is for readers: the path must be an archive of this schema.
    `Archive.create_or_open(path)` is for recorders: it creates a missing or empty folder, migrates
    an old archive, and refuses a folder that holds something else. The journal of reps in flight
    and recovery live in evalb/journal.py (reached through `begin_run` and `recover_stale`).
    """

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        # runs file -> its rows' (slot, outcome, started_at); committed files never change, so each
        # is read once per process however often a grid asks which slots are filled
        self._runs_seen: dict[str, list[tuple[str, str, dt.datetime]]] = {}
        self._commits = 0
        self._runs_lock = threading.Lock()

    @classmethod
    def open(cls, path: Path | str, *, writable: bool = False) -> Archive:
        """The archive at `path`, checked to exist and be readable by this evalb (no writes); with
        `writable`, an existing archive is also migrated if old and checked writable (`ensure`),
        but a missing path or a folder that is not an archive is still refused, never created.
        An `s3://bucket/prefix` path is read through a local cache mirror (evalb/objectstore.py)."""
        if str(path).startswith("s3:/"):
            from evalb import objectstore

            if writable:
                raise ArchiveError(
                    f"cannot record into {objectstore.S3Url.parse(path)}",
                    hint="record into a local --archive, then: evalb archive push LOCAL s3://...",
                )
            return objectstore.open_archive(path)
        root = Path(path)
        if not root.exists():
            raise NotAnArchiveError(
                f"{root} is not an evalb archive (no such folder)",
                hint="pass the folder evalb-record wrote with --archive DIR",
            )
        if not root.is_dir():
            raise NotAnArchiveError(f"{root} is a file, not an archive folder", hint="pass --archive DIR")
        archive = cls(root)
        if not archive.marker.exists():
            what = "an empty folder" if not any(root.iterdir()) else "a folder without archive.json"
            raise NotAnArchiveError(
                f"{root} is not an evalb archive ({what})",
                hint="record into it first with evalb-record, or pass the right --archive",
            )
        if writable:
            archive.ensure()
        else:
            archive.check_readable()
        return archive

    @classmethod
    def create_or_open(cls, path: Path | str) -> Archive:
        """The archive at `path` ready for writing: created if missing or empty, migrated if old;
        a folder holding anything but an archive is refused before anything is written in it."""
        archive = cls(path)
        archive.ensure()
        return archive

    def check_space(self, min_free: int = MIN_FREE_BYTES) -> None:
        """Refuse, before anything is written, when the archive's file system is (nearly) full."""
        probe = self.root
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        try:
            st = os.statvfs(probe)
        except OSError:
            return
        free = st.f_bavail * st.f_frsize
        if free < min_free:
            raise ArchiveError(
                f"cannot record into {self.root}: the disk is full ({free // 1024} KiB free, "
                f"{min_free // (1024 * 1024)} MiB needed)",
                hint="free space and rerun",
            )

    # --- layout -------------------------------------------------------------------------------
    def table_dir(self, table: str) -> Path:
        return self.root / table

    @property
    def marker(self) -> Path:
        return self.root / "archive.json"

    @property
    def inflight_dir(self) -> Path:
        return self.root / "inflight"

    @property
    def locks_dir(self) -> Path:
        return self.root / "locks"

    @property
    def quarantine_dir(self) -> Path:
        return self.root / "quarantine"

    def exists(self) -> bool:
        return self.marker.is_file()

    def read_marker(self) -> dict[str, Any]:
        try:
            data = json.loads(self.marker.read_text())
        except FileNotFoundError as e:
            raise ArchiveError(
                f"{self.root} is not an evalb archive (no archive.json)",
                hint="record into it first with evalb-record, or pass the right --archive",
            ) from e
        except (OSError, ValueError) as e:
            raise ArchiveError(f"cannot read {self.marker}: {e}") from e
        if data.get("format") != FORMAT:
            raise ArchiveError(f"{self.marker} is not an evalb archive marker")
        return data

    def schema_version(self) -> int:
        return int(self.read_marker().get("schema_version", 0))

    def check_readable(self) -> None:
        """Raise a clear error unless this is an archive this evalb can read as is."""
        version = self.schema_version()
        if version > SCHEMA_VERSION:
            raise ArchiveError(
                f"{self.root} has archive schema v{version}, newer than this evalb (v{SCHEMA_VERSION})",
                hint="upgrade evalb",
            )
        if version < SCHEMA_VERSION:
            raise ArchiveError(
                f"{self.root} has archive schema v{version}; this evalb reads v{SCHEMA_VERSION}",
                hint=f"run: evalb-record migrate --archive {self.root}",
            )

    def refuse_foreign(self) -> None:
        """Raise unless `root` is missing, an empty folder, or already an archive (or becoming one)."""
        if self.root.exists() and not self.root.is_dir():
            raise NotAnArchiveError(
                f"{self.root} is a file, not an archive folder", hint="pass --archive DIR"
            )
        if not self.root.is_dir() or self.marker.exists():
            return
        try:
            foreign = sorted(
                p.name
                for p in self.root.iterdir()
                if p.name not in _OWN_ENTRIES and not p.name.startswith(".archive.json.")
            )
        except OSError as e:
            raise _os_error("read", self.root, e) from e
        if foreign:
            more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
            raise NotAnArchiveError(
                f"{self.root} is not an evalb archive and not empty (it holds {foreign[0]!r}{more})",
                hint="pass a new or empty folder, or the archive you recorded into",
            )

    def ensure(self) -> None:
        """Create the archive if needed and check it is writable and of this schema (migrating if
        old); a non-empty folder that is not an archive is refused (`refuse_foreign`)."""
        self.refuse_foreign()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            for d in (*TABLES, "inflight", "locks"):
                (self.root / d).mkdir(exist_ok=True)
            if not self.marker.exists():
                body = {
                    "format": FORMAT,
                    "schema_version": SCHEMA_VERSION,
                    "created_at": utcnow().isoformat(),
                    "migrations": [],
                }
                tmp = self.root / f".archive.json.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp"
                tmp.write_text(json.dumps(body, indent=2) + "\n")
                try:
                    os.link(tmp, self.marker)  # fails if another recorder created it first
                except FileExistsError:
                    pass
                finally:
                    tmp.unlink()
            probe = self.locks_dir / f".probe-{uuid.uuid4().hex[:8]}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as e:
            raise _os_error("write to archive", self.root, e) from e
        version = self.schema_version()
        if version < SCHEMA_VERSION:
            migrations.migrate(self.root, version)
        self.check_readable()

    # --- reading ------------------------------------------------------------------------------
    def files(self, table: str) -> list[str]:
        """The committed files of one table, sorted: the live compacted batch files plus the small
        files no batch covers (a consistent snapshot, see evalb/compact.py); temp files of writers
        and compacted files not yet published are never listed. New code reads through this."""
        from evalb import compact

        return compact.table_files(self.root, table)

    def has_rows(self, table: str) -> bool:
        return bool(self.files(table))

    def scan(self, table: str) -> pl.LazyFrame:
        """A lazy scan of one table; empty with the table's schema when it has no files.

        The file list is passed, never a glob, so a path with `[`, `*` or `'` in it works.
        """
        files = self.files(table)
        if not files:
            return to_frame(table, []).lazy()
        return pl.scan_parquet(files, missing_columns="insert", extra_columns="ignore", glob=False)

    def read(self, table: str, columns: Sequence[str] | None = None) -> pl.DataFrame:
        """A whole table (or some of its columns) as a Polars frame."""
        lf = self.scan(table)
        if columns is not None:
            lf = lf.select(list(columns))
        return lf.collect()

    def connect(self) -> duckdb.DuckDBPyConnection:
        """A DuckDB connection with one view per table (an empty typed table where none is
        written). File paths go to DuckDB as values, never pasted into SQL."""
        con = duckdb.connect()
        for table in TABLES:
            files = self.files(table)
            if files:
                con.read_parquet(files, union_by_name=True).create_view(table)
            else:
                con.register(f"_empty_{table}", to_frame(table, []))
                con.execute(f"CREATE TABLE {table} AS SELECT * FROM _empty_{table}")
                con.unregister(f"_empty_{table}")
        return con

    def latest_scores(self, all_attempts: bool = False) -> pl.DataFrame:
        """The latest score row of every scored run, joined with its runs columns
        (LATEST_RUN_COLUMNS); empty (with those columns) when nothing is scored. Only the last
        attempt of each grid slot counts (earlier ones were retried); `all_attempts` keeps them."""
        latest = self.read("scores").sort("scored_at").group_by("run_id", maintain_order=True).last()
        runs = self.read("runs", ["run_id", "slot", "attempt", *LATEST_RUN_COLUMNS])
        joined = latest.join(runs, on="run_id", how="left")
        if not all_attempts:
            joined = last_attempts(joined)
        return joined.select([*to_frame("scores", []).columns, *LATEST_RUN_COLUMNS])

    def with_attempts(self, df: pl.DataFrame) -> pl.DataFrame:
        """`df` (one row per run, with run_id) with each run's slot and attempt joined from runs."""
        runs = self.read("runs", ["run_id", "slot", "attempt"])
        return df.drop([c for c in ("slot", "attempt") if c in df.columns]).join(
            runs, on="run_id", how="left"
        )

    # --- committing ---------------------------------------------------------------------------
    def commit_run(self, run: RunRecord, events: list[EventRecord], artifacts: list[ArtifactRecord]) -> None:
        """Write one run's three files; the runs file last, as the commit marker (on a failure, the
        files already written are removed again)."""
        frames = {
            "artifacts": to_frame("artifacts", artifacts),
            "events": to_frame("events", events),
            "runs": to_frame("runs", [run]),
        }
        written: list[Path] = []
        try:
            for table in RUN_TABLES:
                dest = self.table_dir(table) / f"{run.run_id}.parquet"
                write_parquet_atomic(frames[table], dest)
                written.append(dest)
        except BaseException:
            # no half-committed run: without its runs file, its other files are orphans
            if len(written) < len(RUN_TABLES):
                for p in written:
                    with contextlib.suppress(OSError):
                        p.unlink()
            raise
        self._maybe_compact()

    def _maybe_compact(self) -> None:
        """Background compaction (EVALB_COMPACT_THRESHOLD runs in small files; off by default):
        every so often after a commit, count the small runs files and, past the threshold, start a
        detached compactor (it does nothing if another one holds the archive's compaction lock)."""
        from evalb import compact

        limit = compact.threshold()
        if limit <= 0:
            return
        with self._runs_lock:
            self._commits += 1
            due = self._commits % max(1, min(limit // 10, 50)) == 0
        if due and compact.small_runs_pending(self.root) >= limit:
            with contextlib.suppress(OSError):
                compact.spawn_background(self.root)

    def append_rows(self, table: str, rows: Sequence[Record] | Sequence[dict[str, Any]]) -> Path | None:
        """Add rows to a table as one new file (used for judgements and scores)."""
        if not rows:
            return None
        dest = self.table_dir(table) / f"{utcnow():%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:12]}.parquet"
        self.table_dir(table).mkdir(parents=True, exist_ok=True)
        write_parquet_atomic(to_frame(table, rows), dest)
        return dest

    # --- in-flight reps -------------------------------------------------------------------------
    def begin_run(self, run: RunRecord) -> InflightRun:
        """Start journaling a rep; the returned object appends lines and commits at the end."""
        from evalb.journal import InflightRun

        return InflightRun(self, run)

    @contextlib.contextmanager
    def slot_lock(self, slot: str) -> Iterator[bool]:
        """Try to claim a grid slot; yields False if another live recorder holds it."""
        name = hashlib.sha256(slot.encode()).hexdigest()[:32]
        path = self.locks_dir / f"slot-{name}.lock"
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)

    # --- journal and recovery (evalb/journal.py) ---------------------------------------------
    def sweep_temp_files(self) -> list[Path]:
        """Remove the temp files of killed writers (see `evalb.journal.sweep_temp_files`)."""
        from evalb import journal

        return journal.sweep_temp_files(self)

    def recover_stale(self) -> list[str]:
        """Commit every journal whose recorder is gone as `interrupted` (`evalb.journal.recover_stale`)."""
        from evalb import journal

        return journal.recover_stale(self)

    def recover_one(self, meta: Path, detail: str) -> bool:
        """Commit one journal as `interrupted`, or quarantine it (`evalb.journal.recover_one`)."""
        from evalb import journal

        return journal.recover_one(self, meta, detail)

    def quarantine(self, path: Path, reason: str) -> Path:
        """Move an in-flight file to quarantine/ with a reason (`evalb.journal.quarantine`)."""
        from evalb import journal

        return journal.quarantine(self, path, reason)

    def _runs_index(self) -> list[tuple[str, str, dt.datetime]]:
        """(slot, outcome, started_at) of every committed run. Each file of the current list is
        read once per process (committed and compacted files never change), only its three
        columns: after compaction that is a few large files, not one file per run."""
        files = self.files("runs")
        with self._runs_lock:
            new = [f for f in files if f not in self._runs_seen]
            if new:
                df = (
                    pl.scan_parquet(new, glob=False, include_file_paths="_file")
                    .select("_file", "slot", "outcome", "started_at")
                    .collect()
                )
                for f in new:
                    self._runs_seen[f] = []
                for f, *row in df.iter_rows():
                    self._runs_seen[f].append((row[0], row[1], row[2]))
            if len(self._runs_seen) > 2 * len(files) + 64:  # files compacted away meanwhile
                self._runs_seen = {f: self._runs_seen[f] for f in files}
            return [row for f in files for row in self._runs_seen[f]]

    def committed_slots(self) -> dict[str, str]:
        """slot -> outcome of the committed runs (interrupted and harness_error runs do not fill
        their slot)."""
        rows = sorted((r for r in self._runs_index() if r[1] not in UNFILLED), key=lambda r: r[2])
        return {slot: outcome for slot, outcome, _ in rows}

    def attempts(self, slot: str) -> int:
        return sum(1 for r in self._runs_index() if r[0] == slot)


# --- module-level wrappers (kept for notebooks and code outside this package; new code uses the
# Archive methods) -----------------------------------------------------------------------------------
def has_rows(root: Path | str, table: str) -> bool:
    """Wrapper: `Archive(root).has_rows(table)`."""
    return Archive(root).has_rows(table)


def read_table(root: Path | str, table: str, columns: list[str] | None = None) -> pl.DataFrame:
    """Wrapper: `Archive(root).read(table, columns)`."""
    return Archive(root).read(table, columns)


def connect(root: Path | str) -> duckdb.DuckDBPyConnection:
    """Wrapper: `Archive.open(root).connect()`."""
    return Archive.open(root).connect()
