"""The archive on disk: a directory of Parquet files per table, written crash-safely by many recorders.

Layout (documented in docs/archive.md)::

    ARCHIVE/archive.json                 format marker and schema version
    ARCHIVE/<table>/<id>.parquet         runs, events, artifacts: one file per run; judgements,
                                         scores: one file per scoring pass
    ARCHIVE/inflight/<run_id>.jsonl      stdout lines of a rep still running, appended as they arrive
    ARCHIVE/inflight/<run_id>.json       that rep's run row as known at its start
    ARCHIVE/locks/                       flock files: a live recorder holds its rep's and slot's lock
    ARCHIVE/quarantine/                  journals that could not be committed, each with a .reason

Why this shape: Parquet files cannot be appended to, and two recorders must be able to write at
once. So each run is committed as its own files, each written to a hidden temp name and renamed
into place (atomic), the runs row last: a run without a runs row is not yet committed. A rep's
lines go to an append-only journal first, so a recorder killed at any moment loses nothing: the
next recorder (or `evalb-record recover`) finds journals whose lock nobody holds and commits them
as `interrupted`. A journal that cannot be committed (or a garbage file in inflight/) is moved to
quarantine/ with a one-line reason and one warning, so it never blocks later recorders. Readers
need no evalb code: `read_parquet('ARCHIVE/runs/*.parquet')`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import hashlib
import json
import os
import sys
import threading
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from evalb import migrations
from evalb.errors import ArchiveError
from evalb.schema import SCHEMA_VERSION, TABLES, ArtifactRecord, EventRecord, Record, RunRecord, to_frame
from evalb.transcript import parse_line, split_lines

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


def write_parquet_atomic(frame: pl.DataFrame, dest: Path) -> None:
    """Write `frame` to `dest` via a hidden temp file and rename, so readers never see a partial file."""
    # The writer's pid is in the name, so that recovery can sweep what a killed writer left.
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    try:
        frame.write_parquet(tmp, compression="zstd", statistics=True)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, dest)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise _os_error("write", dest, e) from e
    except Exception:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_dir(dest.parent)


#: A recorder refuses to start with less free space than this in the archive's file system: a
#: rep's files are small (~0.1-1 MB), but a disk that fills mid-grid leaves nothing to gain.
MIN_FREE_BYTES = 16 * 1024 * 1024


class Archive:
    """An evalb archive directory: create/check it, commit runs, recover interrupted reps."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        # runs file name -> (slot, outcome, started_at); committed files never change, so each is
        # read once per process however often a grid asks which slots are filled
        self._runs_seen: dict[str, tuple[str, str, dt.datetime]] = {}
        self._runs_lock = threading.Lock()

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

    def ensure(self) -> None:
        """Create the archive if needed and check it is writable and of this schema (migrating if old)."""
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

    def sweep_temp_files(self) -> list[Path]:
        """Remove hidden temp files left by writers that were killed mid-write (readers never see
        them; this only frees the space). A live writer's files are left alone."""
        swept = []
        for tmp in [*self.root.glob(".*.tmp"), *self.root.glob("*/.*.tmp")]:
            pid = _writer_pid(tmp.name)
            if pid is not None and not _alive(pid):
                with contextlib.suppress(OSError):
                    tmp.unlink()
                    swept.append(tmp)
        return swept

    def recover_stale(self) -> list[str]:
        """Commit every journal whose recorder is gone as an `interrupted` run; return their ids.
        A journal that cannot be committed, and any garbage in inflight/, is quarantined instead.
        Also sweeps the temp files of killed writers."""
        recovered: list[str] = []
        self.sweep_temp_files()
        if not self.inflight_dir.is_dir():
            return recovered
        for meta in sorted(self.inflight_dir.glob("*.json")):
            run_id = meta.stem
            lock = self.locks_dir / f"run-{run_id}.lock"
            try:
                fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o644)
            except OSError:
                continue
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # its recorder is alive
                if not meta.exists():
                    continue  # committed meanwhile
                if self.recover_one(meta, _recovered_detail(lock)):
                    recovered.append(run_id)
                with contextlib.suppress(OSError):
                    lock.unlink()  # held by us, and its rep is done with
            finally:
                os.close(fd)
        with contextlib.suppress(OSError):
            for orphan in self.inflight_dir.glob("*.jsonl"):
                # a journal without its run row (.json) cannot be committed: keep it apart
                if not orphan.with_suffix(".json").exists() and _unlocked(
                    self.locks_dir / f"run-{orphan.stem}.lock"
                ):
                    self.quarantine(orphan, "a journal without its run row (inflight/<id>.json)")
        return recovered

    def recover_one(self, meta: Path, detail: str) -> bool:
        """Commit the journal of `meta` (inflight/<id>.json, lock held by the caller) as an
        `interrupted` run; quarantine it when it cannot be. True if it was committed."""
        try:
            _commit_interrupted(self, meta, detail)
            return True
        except Exception as e:  # anything: a garbage row, lines that cannot be encoded, ...
            self.quarantine(meta, f"could not be committed: {_one_line(e)}")
            return False

    def quarantine(self, path: Path, reason: str) -> Path:
        """Move an in-flight file (and its journal or row) to quarantine/ with a one-line reason
        file, warning once on stderr. Returns the reason file."""
        self.quarantine_dir.mkdir(exist_ok=True)
        stem = path.name.split(".", 1)[0] or "unnamed"
        dest = self.quarantine_dir / stem
        while dest.with_suffix(".reason").exists():
            dest = self.quarantine_dir / f"{stem}-{uuid.uuid4().hex[:6]}"
        moved = []
        for p in {path, path.with_suffix(".json"), path.with_suffix(".jsonl")}:
            if p.exists():
                with contextlib.suppress(OSError):
                    os.replace(p, dest.with_name(dest.name + p.suffix))
                    moved.append(p.name)
        note = dest.with_suffix(".reason")
        note.write_text(f"{', '.join(sorted(moved))}: {reason}\n")
        short = reason if len(reason) <= 160 else reason[:157] + "..."
        print(f"warning: quarantined inflight/{path.name}: {short} (see {note})", file=sys.stderr)
        return note

    def _runs_index(self) -> list[tuple[str, str, dt.datetime]]:
        """(slot, outcome, started_at) of every committed run, reading only files not seen before."""
        runs_dir = self.table_dir("runs")
        if not runs_dir.is_dir():
            return []
        with self._runs_lock:
            new = [p for p in runs_dir.glob("*.parquet") if p.name not in self._runs_seen]
            if new:
                df = pl.read_parquet([str(p) for p in new], columns=["slot", "outcome", "started_at"])
                for p, row in zip(new, df.iter_rows(), strict=True):
                    self._runs_seen[p.name] = row
            return list(self._runs_seen.values())

    def committed_slots(self) -> dict[str, str]:
        """slot -> outcome of the committed runs (interrupted and harness_error runs do not fill
        their slot)."""
        rows = sorted((r for r in self._runs_index() if r[1] not in UNFILLED), key=lambda r: r[2])
        return {slot: outcome for slot, outcome, _ in rows}

    def attempts(self, slot: str) -> int:
        return sum(1 for r in self._runs_index() if r[0] == slot)


def _writer_pid(name: str) -> int | None:
    """The pid in a temp file name `.<name>.<pid>-<random>.tmp`, if it has one."""
    stem = name.removesuffix(".tmp").rsplit(".", 1)[-1]
    pid, _, _ = stem.partition("-")
    return int(pid) if pid.isdigit() else None


def _one_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {' '.join(str(e).split())}"[:300]


def _unlocked(lock: Path) -> bool:
    """True when no live recorder holds this lock file."""
    try:
        fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o644)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def _recovered_detail(lock: Path) -> str:
    """Why a journal found without its recorder was interrupted (its lock file names the pid)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        pid = int(lock.read_text().split()[0])
        return (
            f"the recorder (pid {pid}) was killed or died before the rep ended; committed later by "
            "recovery with the lines it had journaled"
        )
    return "the recorder stopped before the rep ended; committed later by recovery with the lines it had"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class InflightRun:
    """A rep being recorded: its stdout lines are journaled as they arrive, under a held lock."""

    def __init__(self, archive: Archive, run: RunRecord) -> None:
        self.archive = archive
        self.run = run
        self.run_id = run.run_id
        self.meta_path = archive.inflight_dir / f"{run.run_id}.json"
        self.journal_path = archive.inflight_dir / f"{run.run_id}.jsonl"
        lock = archive.locks_dir / f"run-{run.run_id}.lock"
        try:
            self._lock_fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o644)
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            os.ftruncate(self._lock_fd, 0)
            os.write(self._lock_fd, f"{os.getpid()}\n".encode())  # names the recorder to recovery
            self._journal = open(self.journal_path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the rep
            tmp = self.meta_path.with_suffix(".json.tmp")
            tmp.write_text(run.model_dump_json())
            os.replace(tmp, self.meta_path)
        except OSError as e:
            raise _os_error("start a rep in", archive.root, e) from e
        self.lines: list[tuple[str, str | None, dt.datetime]] = []

    def append(self, line: str, encoding: str | None = None) -> None:
        """Journal one stdout line (without its newline) at once; `encoding` as `decode_line` says.
        Entries are ASCII JSON, one per line: nothing in a line can split or break them."""
        now = utcnow()
        self.lines.append((line, encoding, now))
        entry: dict[str, str] = {"t": now.isoformat(), "line": line}
        if encoding:
            entry["enc"] = encoding
        self._journal.write(json.dumps(entry) + "\n")
        self._journal.flush()

    def events(self) -> list[EventRecord]:
        return _events(self.run_id, self.lines)

    def commit(self, run: RunRecord, artifacts: list[ArtifactRecord]) -> None:
        """Commit the finished rep, then drop its journal and lock."""
        self._journal.close()
        self.archive.commit_run(run, self.events(), artifacts)
        self._cleanup()

    def fail(self, run: RunRecord) -> None:
        """Commit the rep as it stands after a fault of the harness (`run` says what): its lines,
        no end state. If its lines cannot be committed, the journal is quarantined and the row is
        committed alone; if not even that, the journal is left for recovery and the error raised."""
        with contextlib.suppress(Exception):
            self._journal.close()
        try:
            self.archive.commit_run(run, self.events(), [])
        except Exception as e:
            try:
                self.archive.quarantine(self.meta_path, f"could not be committed: {_one_line(e)}")
                note = f"{run.outcome_detail}; its lines could not be committed and are in quarantine/"
                self.archive.commit_run(run.model_copy(update={"outcome_detail": note}), [], [])
            except BaseException:
                self.abandon()
                raise
        self._cleanup()

    def interrupt(self, detail: str) -> None:
        """Commit the rep at once as `interrupted` with `detail` (best effort: on a failure its
        journal waits for recovery)."""
        self.abandon()
        lock = self.archive.locks_dir / f"run-{self.run_id}.lock"
        try:
            fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o644)
        except OSError:
            return
        try:
            with contextlib.suppress(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if self.meta_path.exists() and self.archive.recover_one(self.meta_path, detail):
                    with contextlib.suppress(OSError):
                        lock.unlink()
        finally:
            os.close(fd)

    def abandon(self) -> None:
        """Release the lock but keep the journal: recovery will commit it as interrupted."""
        with contextlib.suppress(Exception):
            self._journal.close()
        with contextlib.suppress(OSError):
            os.close(self._lock_fd)

    def _cleanup(self) -> None:
        for p in (self.journal_path, self.meta_path):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
        with contextlib.suppress(OSError):
            (self.archive.locks_dir / f"run-{self.run_id}.lock").unlink()
        os.close(self._lock_fd)


def _events(run_id: str, lines: Sequence[tuple[str, str | None, dt.datetime]]) -> list[EventRecord]:
    out: list[EventRecord] = []
    seq = 0
    for line, enc, at in lines:
        if not line.strip():
            continue
        out.extend(parse_line(run_id, seq, line, at, enc))
        seq += 1
    return out


def read_journal(journal: Path) -> list[tuple[str, str | None, dt.datetime]]:
    """A journal's lines (raw, raw_encoding, received_at); entries torn by a kill are skipped."""
    out: list[tuple[str, str | None, dt.datetime]] = []
    if not journal.exists():
        return out
    for entry in split_lines(journal.read_bytes()):
        try:
            rec = json.loads(entry)
            line, at = rec["line"], dt.datetime.fromisoformat(rec["t"])
            enc = rec.get("enc")
        except (ValueError, KeyError, TypeError, AttributeError):
            continue  # a journal entry torn by the kill itself
        if isinstance(line, str) and (enc is None or isinstance(enc, str)):
            out.append((line, enc, at))
    return out


def _commit_interrupted(archive: Archive, meta: Path, detail: str) -> None:
    run = RunRecord.model_validate_json(meta.read_bytes())
    journal = meta.with_suffix(".jsonl")
    lines = read_journal(journal)
    events = _events(run.run_id, lines)
    last_at = lines[-1][2] if lines else None
    n_lines = len({e.seq for e in events})
    update = {
        "outcome": "interrupted",
        "outcome_detail": detail,
        "ended_at": None,
        "n_lines": n_lines,
        "n_malformed": sum(1 for e in events if e.malformed),
        "hook_seen": any(e.type == "system" and e.subtype == "hook_response" for e in events),
        "reached_model": any(e.type == "assistant" and '"<synthetic>"' not in e.raw for e in events),
        "duration_ms": int((last_at - run.started_at).total_seconds() * 1000) if last_at else None,
    }
    run = run.model_copy(update=update)
    archive.commit_run(run, events, [])
    for p in (journal, meta):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


# --- reading -------------------------------------------------------------------------------------
def table_glob(root: Path | str, table: str) -> str:
    return str(Path(root) / table / "*.parquet")


def has_rows(root: Path | str, table: str) -> bool:
    d = Path(root) / table
    return d.is_dir() and any(d.glob("*.parquet"))


def read_table(root: Path | str, table: str, columns: list[str] | None = None) -> pl.DataFrame:
    """A whole table as a Polars frame (empty with the right schema when there are no files)."""
    if not has_rows(root, table):
        empty = to_frame(table, [])
        return empty.select(columns) if columns else empty
    return pl.read_parquet(table_glob(root, table), columns=columns)


def connect(root: Path | str) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with one view per table (an empty typed table where none is written)."""
    Archive(root).check_readable()
    con = duckdb.connect()
    for table in TABLES:
        if has_rows(root, table):
            con.execute(
                f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{table_glob(root, table)}', union_by_name=true)"
            )
        else:
            empty = to_frame(table, [])  # noqa: F841 - referenced by name in the SQL below
            con.execute(f"CREATE TABLE {table} AS SELECT * FROM empty")
    return con
