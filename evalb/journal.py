"""The journal of reps in flight, and recovery of the reps whose recorder died (docs/archive.md).

A rep's stdout lines go to an append-only journal (ARCHIVE/inflight/<run_id>.jsonl, its run row as
known at the start beside it as <run_id>.json) under a held lock (ARCHIVE/locks/run-<id>.lock), so
a recorder killed at any moment loses nothing: the next recorder (or `evalb-record recover`) finds
journals whose lock nobody holds and commits them as `interrupted`. A journal that cannot be
committed (or a garbage file in inflight/) is moved to quarantine/ with a one-line reason and one
warning, so it never blocks later recorders.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import logging
import os
import uuid
from collections.abc import Sequence
from pathlib import Path

from evalb.archive import Archive, _os_error, utcnow
from evalb.schema import ArtifactRecord, EventRecord, RunRecord
from evalb.transcript import parse_line, split_lines

log = logging.getLogger(__name__)


def sweep_temp_files(archive: Archive) -> list[Path]:
    """Remove hidden temp files left by writers that were killed mid-write (readers never see
    them; this only frees the space). A live writer's files are left alone."""
    swept = []
    for tmp in [*archive.root.glob(".*.tmp"), *archive.root.glob("*/.*.tmp")]:
        pid = _writer_pid(tmp.name)
        if pid is not None and not _alive(pid):
            with contextlib.suppress(OSError):
                tmp.unlink()
                swept.append(tmp)
    return swept


def recover_stale(archive: Archive) -> list[str]:
    """Commit every journal whose recorder is gone as an `interrupted` run; return their ids.
    A journal that cannot be committed, and any garbage in inflight/, is quarantined instead.
    Also sweeps the temp files of killed writers."""
    recovered: list[str] = []
    sweep_temp_files(archive)
    if not archive.inflight_dir.is_dir():
        return recovered
    for meta in sorted(archive.inflight_dir.glob("*.json")):
        run_id = meta.stem
        lock = archive.locks_dir / f"run-{run_id}.lock"
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
            if recover_one(archive, meta, _recovered_detail(lock)):
                recovered.append(run_id)
            with contextlib.suppress(OSError):
                lock.unlink()  # held by us, and its rep is done with
        finally:
            os.close(fd)
    with contextlib.suppress(OSError):
        for orphan in archive.inflight_dir.glob("*.jsonl"):
            # a journal without its run row (.json) cannot be committed: keep it apart
            if not orphan.with_suffix(".json").exists() and _unlocked(
                archive.locks_dir / f"run-{orphan.stem}.lock"
            ):
                quarantine(archive, orphan, "a journal without its run row (inflight/<id>.json)")
    return recovered


def recover_one(archive: Archive, meta: Path, detail: str) -> bool:
    """Commit the journal of `meta` (inflight/<id>.json, lock held by the caller) as an
    `interrupted` run; quarantine it when it cannot be. True if it was committed."""
    try:
        commit_interrupted(archive, meta, detail)
        return True
    except Exception as e:  # anything: a garbage row, lines that cannot be encoded, ...
        quarantine(archive, meta, f"could not be committed: {_one_line(e)}")
        return False


def quarantine(archive: Archive, path: Path, reason: str) -> Path:
    """Move an in-flight file (and its journal or row) to quarantine/ with a one-line reason
    file, warning once (through `logging`; the CLI prints it on stderr). Returns the reason file."""
    archive.quarantine_dir.mkdir(exist_ok=True)
    stem = path.name.split(".", 1)[0] or "unnamed"
    dest = archive.quarantine_dir / stem
    while dest.with_suffix(".reason").exists():
        dest = archive.quarantine_dir / f"{stem}-{uuid.uuid4().hex[:6]}"
    moved = []
    for p in {path, path.with_suffix(".json"), path.with_suffix(".jsonl")}:
        if p.exists():
            with contextlib.suppress(OSError):
                os.replace(p, dest.with_name(dest.name + p.suffix))
                moved.append(p.name)
    note = dest.with_suffix(".reason")
    note.write_text(f"{', '.join(sorted(moved))}: {reason}\n")
    short = reason if len(reason) <= 160 else reason[:157] + "..."
    log.warning("quarantined inflight/%s: %s (see %s)", path.name, short, note)
    return note


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
                quarantine(self.archive, self.meta_path, f"could not be committed: {_one_line(e)}")
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
                if self.meta_path.exists() and recover_one(self.archive, self.meta_path, detail):
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


def commit_interrupted(archive: Archive, meta: Path, detail: str) -> None:
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
