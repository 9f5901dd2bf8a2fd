"""Compaction: fold committed per-run files into large sorted Parquet files, atomically for readers.

Layout (docs/archive.md, "Compaction")::

    ARCHIVE/compaction/manifest.json           the live batches; replaced by rename (the one switch)
    ARCHIVE/compaction/<batch>.covers.json     the small-file stems one batch holds (immutable)
    ARCHIVE/<table>/compacted-<batch>.parquet  one file per table per batch, sorted, row-grouped
    ARCHIVE/locks/compact.lock                 one compactor at a time (flock)

A reader (`Archive.files`) reads the manifest, lists the table's directory, reads the manifest
again (retrying if it changed) and keeps the live batches' files plus the small files no live batch
covers: it sees the old set or the new one, never both or neither. Compacted files not named by the
manifest are ignored (a batch being written, or left by a killed compactor). Covered small files
and superseded batches are deleted only once they have been covered for `grace` seconds, so a
reader still holding the old list can finish; recorders keep committing small files meanwhile.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import logging
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from evalb.errors import ArchiveError

if TYPE_CHECKING:
    from evalb.archive import Archive

log = logging.getLogger(__name__)

FORMAT = "evalb-compaction"
VERSION = 1
DIR = "compaction"
PREFIX = "compacted-"
#: Tables whose small files are one per run, named <run_id>.parquet (committed once runs/<id> exists).
RUN_TABLES = ("artifacts", "events", "runs")
POOLED_TABLES = ("judgements", "scores")
#: Sort order of a batch file: a reader filtering on run_id (or checker_hash) skips row groups.
SORT_KEYS: dict[str, tuple[str, ...]] = {
    "runs": ("run_id",),
    "events": ("run_id", "seq", "block_index"),
    "artifacts": ("run_id", "path"),
    "judgements": ("run_id", "rubric_hash", "judge", "judged_at"),
    "scores": ("run_id", "checker_hash", "scored_at"),
}
ROW_GROUP_ROWS: dict[str, int] = {
    "runs": 16_384,
    "events": 32_768,
    "artifacts": 16_384,
    "judgements": 32_768,
    "scores": 32_768,
}
DEFAULT_GRACE_S = 600.0
#: Recorders compact in the background once this many committed runs are still small files (0: off).
THRESHOLD_ENV = "EVALB_COMPACT_THRESHOLD"


def covers_key(table: str) -> str:
    """The covers list that applies to a table's small files (the three run tables share one)."""
    return "runs" if table in RUN_TABLES else table


# --- the manifest ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Batch:
    id: str
    created_at: str
    files: dict[str, list[str]]  # table -> its part files (names inside the table's directory)
    rows: dict[str, int]
    swept: bool = False  # the small files it covers are deleted


@dataclass(frozen=True)
class Generation:
    number: int = 0
    batches: tuple[Batch, ...] = ()
    #: Files (relative to the archive) that no live batch uses any more, and since when (ISO time).
    retired: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> str:
        body = {
            "format": FORMAT,
            "version": VERSION,
            "generation": self.number,
            "batches": [
                {"id": b.id, "created_at": b.created_at, "files": b.files, "rows": b.rows, "swept": b.swept}
                for b in self.batches
            ],
            "retired": [{"path": p, "since": s} for p, s in self.retired],
        }
        return json.dumps(body, indent=1, sort_keys=True) + "\n"


def manifest_path(root: Path) -> Path:
    return root / DIR / "manifest.json"


def read_manifest_bytes(root: Path) -> bytes:
    try:
        return manifest_path(root).read_bytes()
    except FileNotFoundError:
        return b""
    except OSError as e:
        raise ArchiveError(f"cannot read {manifest_path(root)}: {e.strerror}") from e


_parsed: dict[bytes, Generation] = {}
_covers: dict[tuple[str, str], dict[str, frozenset[str]]] = {}
_covered: dict[tuple[str, bytes, str], frozenset[str]] = {}
_cache_lock = threading.Lock()


def parse_manifest(raw: bytes, where: Path) -> Generation:
    """The generation a manifest's bytes describe (cached: the same bytes parse once)."""
    if not raw:
        return Generation()
    with _cache_lock:
        hit = _parsed.get(raw)
    if hit is not None:
        return hit
    try:
        data = json.loads(raw)
        if data.get("format") != FORMAT:
            raise ValueError("not a compaction manifest")
        if int(data.get("version", 0)) > VERSION:
            raise ArchiveError(
                f"{where} was written by a newer evalb (compaction format v{data['version']})",
                hint="upgrade evalb",
            )
        gen = Generation(
            number=int(data["generation"]),
            batches=tuple(
                Batch(
                    id=str(b["id"]),
                    created_at=str(b["created_at"]),
                    files={str(k): [str(f) for f in v] for k, v in b["files"].items()},
                    rows={str(k): int(v) for k, v in b.get("rows", {}).items()},
                    swept=bool(b.get("swept", False)),
                )
                for b in data["batches"]
            ),
            retired=tuple((str(r["path"]), str(r["since"])) for r in data.get("retired", [])),
        )
    except ArchiveError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ArchiveError(
            f"{where} is damaged ({type(e).__name__}: {e})",
            hint="restore it from a backup; the compacted files it names are beside each table",
        ) from e
    with _cache_lock:
        if len(_parsed) > 64:
            _parsed.clear()
        _parsed[raw] = gen
    return gen


def read_generation(root: Path) -> Generation:
    return parse_manifest(read_manifest_bytes(root), manifest_path(root))


def covers_path(root: Path, batch_id: str) -> Path:
    return root / DIR / f"{batch_id}.covers.json"


def batch_covers(root: Path, batch_id: str) -> dict[str, frozenset[str]]:
    """The small-file stems a batch holds, per covers key ('runs', 'judgements', 'scores')."""
    key = (str(root), batch_id)
    with _cache_lock:
        hit = _covers.get(key)
    if hit is not None:
        return hit
    path = covers_path(root, batch_id)
    try:
        data = json.loads(path.read_bytes())
        out = {k: frozenset(str(s) for s in v) for k, v in data.items()}
    except FileNotFoundError as e:
        raise ArchiveError(
            f"{path} is missing: the archive's compaction manifest names it",
            hint="restore it from a backup (without it, the batch's runs could be counted twice)",
        ) from e
    except (OSError, ValueError, TypeError, AttributeError) as e:
        raise ArchiveError(f"cannot read {path}: {e}") from e
    with _cache_lock:
        _covers[key] = out
    return out


def covered(root: Path, raw: bytes, gen: Generation, key: str) -> frozenset[str]:
    """Union of the stems the live batches cover under `key` (cached per manifest)."""
    ck = (str(root), raw, key)
    with _cache_lock:
        hit = _covered.get(ck)
    if hit is not None:
        return hit
    out: set[str] = set()
    for b in gen.batches:
        out |= batch_covers(root, b.id).get(key, frozenset())
    result = frozenset(out)
    with _cache_lock:
        if len(_covered) > 64:
            _covered.clear()
        _covered[ck] = result
    return result


def _list_parquet(d: Path) -> list[str]:
    try:
        with os.scandir(d) as it:
            return [e.name for e in it if e.name.endswith(".parquet") and not e.name.startswith(".")]
    except FileNotFoundError:
        return []
    except OSError as e:
        raise ArchiveError(f"cannot list {d}: {e.strerror}") from e


def snapshot(root: Path, table: str) -> tuple[bytes, Generation, list[str]]:
    """A consistent (manifest bytes, generation, directory listing) of one table: the manifest is
    read before and after the listing, and the listing retried until the two agree (seqlock)."""
    d = root / table
    for _ in range(200):
        before = read_manifest_bytes(root)
        names = _list_parquet(d)
        after = read_manifest_bytes(root)
        if before == after:
            return before, parse_manifest(before, manifest_path(root)), names
    raise ArchiveError(
        f"the compaction manifest of {root} kept changing while {table}/ was listed",
        hint="retry; if it persists, stop the process rewriting compaction/manifest.json",
    )


def select(root: Path, table: str, raw: bytes, gen: Generation, names: Iterable[str]) -> list[str]:
    """The files a reader uses: live batch files of `table` and the small files no batch covers."""
    names = set(names)
    out = []
    for b in gen.batches:
        for f in b.files.get(table, []):
            if f not in names:
                raise ArchiveError(
                    f"{root / table / f} is missing: the compaction manifest names it",
                    hint="restore it from a backup; its runs are not anywhere else once compacted",
                )
            out.append(str(root / table / f))
    cov = covered(root, raw, gen, covers_key(table)) if gen.batches else frozenset()
    for n in names:
        if n.startswith(PREFIX) or n[: -len(".parquet")] in cov:
            continue
        out.append(str(root / table / n))
    return sorted(out)


def table_files(root: Path, table: str) -> list[str]:
    raw, gen, names = snapshot(root, table)
    return select(root, table, raw, gen, names)


def small_runs_pending(root: Path) -> int:
    """Committed runs still in small files (what background compaction counts)."""
    raw, gen, names = snapshot(root, "runs")
    cov = covered(root, raw, gen, "runs") if gen.batches else frozenset()
    return sum(1 for n in names if not n.startswith(PREFIX) and n[: -len(".parquet")] not in cov)


# --- writing ------------------------------------------------------------------------------------------
def _atomic_text(path: Path, text: str) -> None:
    from evalb.archive import _fsync_dir

    tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_dir(path.parent)


def publish(root: Path, gen: Generation) -> None:
    """Make `gen` the archive's current generation (one atomic rename)."""
    (root / DIR).mkdir(exist_ok=True)
    _atomic_text(manifest_path(root), gen.to_json())


@contextlib.contextmanager
def compaction_lock(root: Path, *, wait: bool) -> Iterator[bool]:
    """Hold the archive's compaction lock; yields False (not waiting) if another compactor has it."""
    path = root / "locks" / "compact.lock"
    path.parent.mkdir(exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


#: Runs per part file of a batch: bounds the memory a compaction needs (a part is sorted in memory).
PART_RUNS = 2000


def _scan_small(files: list[str]) -> pl.LazyFrame:
    """The small files as one frame (read now): fast when they share a schema, else a column-wise
    union, so a column only some files have (kept by a migration) is never dropped."""
    try:
        df = pl.scan_parquet(files, glob=False, missing_columns="insert", extra_columns="raise").collect()
    except pl.exceptions.SchemaError:
        df = pl.concat([pl.read_parquet(f) for f in files], how="diagonal_relaxed")
    return df.lazy()


def _write_part(df: pl.DataFrame, table: str, dest: Path) -> None:
    from evalb.archive import write_parquet_atomic
    from evalb.schema import polars_schema

    schema = list(polars_schema(table))
    cols = [c for c in schema if c in df.columns] + [c for c in df.columns if c not in schema]
    keys = [k for k in SORT_KEYS[table] if k in df.columns]
    df = df.select(cols).sort(keys, nulls_last=True, maintain_order=True)
    write_parquet_atomic(df, dest, row_group_size=ROW_GROUP_ROWS[table])


def _fold_run_table(
    root: Path, table: str, ids: list[str], small: set[str], old: list[str], batch_id: str
) -> tuple[list[str], int]:
    """Write `table`'s rows of the runs `ids` (sorted) as part files of ≤ PART_RUNS runs each:
    from their small files (`small`: stems present) and, filtered to each part's id range (row
    groups outside it are skipped), from the superseded batch files `old`. Parts hold disjoint,
    ascending run-id ranges, each sorted; returns (part names, rows)."""
    parts: list[str] = []
    rows = 0
    for i in range(0, len(ids), PART_RUNS):
        chunk = ids[i : i + PART_RUNS]
        frames = []
        files = [str(root / table / f"{s}.parquet") for s in chunk if s in small]
        if files:
            frames.append(_scan_small(files))
        for f in old:
            rid = pl.col("run_id")
            frames.append(pl.scan_parquet(f).filter((rid >= chunk[0]) & (rid <= chunk[-1])))
        if not frames:
            continue
        df = pl.concat(frames, how="diagonal_relaxed").collect()
        if df.is_empty() and parts:
            continue
        name = f"{PREFIX}{batch_id}-{len(parts):04d}.parquet"
        _write_part(df, table, root / table / name)
        parts.append(name)
        rows += df.height
    return parts, rows


def _fold_pooled_table(root: Path, table: str, files: list[str], batch_id: str) -> tuple[list[str], int]:
    """Judgements or scores: every input file into one sorted part (these tables are small)."""
    small = [f for f in files if not Path(f).name.startswith(PREFIX)]
    old = [f for f in files if Path(f).name.startswith(PREFIX)]
    frames = ([_scan_small(small)] if small else []) + [pl.scan_parquet(f) for f in old]
    df = pl.concat(frames, how="diagonal_relaxed").collect()
    name = f"{PREFIX}{batch_id}-0000.parquet"
    _write_part(df, table, root / table / name)
    return [name], df.height


def add_batch(root: Path, frames: dict[str, pl.DataFrame], covers: dict[str, list[str]]) -> str:
    """Publish rows that have no small files (a merge's runs) as one new batch, under the
    compaction lock; covers name the run ids it holds (so stray small files of them are hidden).
    Returns the batch id. Atomic like a compaction: readers see all of it or none."""
    with compaction_lock(root, wait=True):
        gen = read_generation(root)
        batch_id = f"g{gen.number + 1:06d}-{uuid.uuid4().hex[:8]}"
        files: dict[str, list[str]] = {}
        rows: dict[str, int] = {}
        (root / DIR).mkdir(exist_ok=True)
        for t, df in frames.items():
            if df.is_empty():
                continue
            name = f"{PREFIX}{batch_id}-0000.parquet"
            _write_part(df, t, root / t / name)
            files[t], rows[t] = [name], df.height
        _atomic_text(covers_path(root, batch_id), json.dumps(covers, sort_keys=True) + "\n")
        stamp = dt.datetime.now(dt.UTC).isoformat()
        batch = Batch(batch_id, stamp, files, rows, swept=True)  # no small files to delete
        publish(root, Generation(gen.number + 1, (*gen.batches, batch), gen.retired))
    return batch_id


@dataclass
class CompactReport:
    batch: str | None = None
    folded: dict[str, int] = field(default_factory=dict)  # table -> small/batch files folded in
    rows: dict[str, int] = field(default_factory=dict)
    runs: int = 0
    deleted: int = 0  # files deleted (covered past the grace period, superseded, orphans)
    waiting: int = 0  # covered small files kept until their grace period ends
    skipped: str | None = None  # why nothing was done

    def text(self) -> str:
        if self.skipped:
            return f"compaction: {self.skipped}\n"
        lines = []
        if self.batch:
            folded = ", ".join(f"{t} {n}" for t, n in sorted(self.folded.items()))
            lines.append(f"compacted {self.runs} runs into batch {self.batch} (files folded: {folded})")
        else:
            lines.append("nothing new to compact")
        lines.append(
            f"deleted {self.deleted} files past the grace period; {self.waiting} covered files wait for it"
        )
        return "\n".join(lines) + "\n"


def _age_s(iso: str, now: dt.datetime) -> float:
    try:
        return (now - dt.datetime.fromisoformat(iso)).total_seconds()
    except ValueError:
        return float("inf")


def _unlink(p: Path) -> int:
    try:
        p.unlink()
        return 1
    except FileNotFoundError:
        return 0


def _cleanup(root: Path, gen: Generation, grace: float, now: dt.datetime) -> tuple[Generation, int, int]:
    """Delete what has been covered or retired for `grace` seconds, and orphaned batch files (the
    caller holds the compaction lock); the generation to publish, files deleted, files waiting."""
    deleted = waiting = 0
    batches = []
    for b in gen.batches:
        if b.swept:
            batches.append(b)
            continue
        cov = batch_covers(root, b.id)
        if _age_s(b.created_at, now) < grace:
            waiting += sum(len(v) * (3 if k == "runs" else 1) for k, v in cov.items())
            batches.append(b)
            continue
        for key, stems in cov.items():
            tables = ("artifacts", "events", "runs") if key == "runs" else (key,)
            for stem in stems:
                for t in tables:  # runs last: what stays is never events without their run
                    deleted += _unlink(root / t / f"{stem}.parquet")
        batches.append(Batch(b.id, b.created_at, b.files, b.rows, swept=True))
    retired = []
    for path, since in gen.retired:
        if _age_s(since, now) < grace:
            retired.append((path, since))
            waiting += 1
        else:
            deleted += _unlink(root / path)
    live = {(t, f) for b in batches for t, parts in b.files.items() for f in parts}
    kept = {p for p, _ in retired}
    from evalb.schema import TABLES

    for t in TABLES:
        for n in _list_parquet(root / t):
            if n.startswith(PREFIX) and (t, n) not in live and f"{t}/{n}" not in kept:
                deleted += _unlink(root / t / n)  # left by a killed compactor: never published
    live_ids = {b.id for b in batches}
    with contextlib.suppress(FileNotFoundError):
        for p in (root / DIR).iterdir():
            stem = p.name.removesuffix(".covers.json")
            if p.name.endswith(".covers.json") and stem not in live_ids and f"{DIR}/{p.name}" not in kept:
                deleted += _unlink(p)
    new = Generation(gen.number, tuple(batches), tuple(retired))
    return new, deleted, waiting


def compact(
    archive: Archive,
    *,
    grace: float = DEFAULT_GRACE_S,
    full: bool = False,
    wait: bool = True,
    min_runs: int = 1,
) -> CompactReport:
    """Fold the archive's committed small files (runs, events, artifacts of committed runs;
    judgements and scores) into one new batch and publish it; with `full`, also fold every live
    batch into it (superseded batches are retired). First deletes what has been covered for
    `grace` seconds. `min_runs`: do nothing unless at least this many runs are still small files.
    Safe beside live recorders and readers, and after a compactor was killed at any point."""
    from evalb.schema import TABLES

    root = archive.root
    report = CompactReport()
    with compaction_lock(root, wait=wait) as mine:
        if not mine:
            report.skipped = "another compaction of this archive is running; nothing done"
            return report
        now = dt.datetime.now(dt.UTC)
        gen = read_generation(root)
        cleaned, report.deleted, _ = _cleanup(root, gen, grace, now)
        if cleaned != gen:
            publish(root, cleaned)
            gen = cleaned
        raw = read_manifest_bytes(root)
        # runs first: a run is committed once its runs file exists, and its other files were
        # written before it, so every id listed here has its events and artifacts in place
        cov_runs = covered(root, raw, gen, "runs") if gen.batches else frozenset()
        committed = {
            n[: -len(".parquet")]
            for n in _list_parquet(root / "runs")
            if not n.startswith(PREFIX) and n[: -len(".parquet")] not in cov_runs
        }
        superseded = list(gen.batches) if full else []
        if min_runs > 1 and len(committed) < min_runs:
            report.skipped = f"{len(committed)} runs in small files (fewer than {min_runs}); nothing done"
            return report
        covers: dict[str, list[str]] = {"runs": sorted(committed)}
        small: dict[str, set[str]] = {}
        for t in TABLES:
            stems = {n[: -len(".parquet")] for n in _list_parquet(root / t) if not n.startswith(PREFIX)}
            if t in RUN_TABLES:
                small[t] = stems & committed
            else:
                small[t] = stems - (covered(root, raw, gen, t) if gen.batches else frozenset())
                covers[t] = sorted(small[t])
        if not committed and not any(small[t] for t in POOLED_TABLES) and len(superseded) <= 1:
            report.waiting = _waiting(root, gen, grace, now)
            return report
        for b in superseded:  # fold the old batches in too: their covers carry over
            for key, held in batch_covers(root, b.id).items():
                covers[key] = sorted(set(covers.get(key, [])) | held)
        batch_id = f"g{gen.number + 1:06d}-{uuid.uuid4().hex[:8]}"
        files: dict[str, list[str]] = {}
        (root / DIR).mkdir(exist_ok=True)
        for t in TABLES:
            old = [str(root / t / f) for b in superseded for f in b.files.get(t, [])]
            if t in RUN_TABLES:
                if not covers["runs"]:
                    continue
                parts, n = _fold_run_table(root, t, covers["runs"], small[t], old, batch_id)
            else:
                inputs = [str(root / t / f"{s}.parquet") for s in sorted(small[t])] + old
                if not inputs:
                    continue
                parts, n = _fold_pooled_table(root, t, inputs, batch_id)
            files[t], report.rows[t] = parts, n
            report.folded[t] = len(small[t]) + len(old)
        _atomic_text(covers_path(root, batch_id), json.dumps(covers, sort_keys=True) + "\n")
        stamp = dt.datetime.now(dt.UTC).isoformat()
        batch = Batch(batch_id, stamp, files, dict(report.rows))
        keep = [b for b in gen.batches if b not in superseded]
        retired = list(gen.retired)
        for b in superseded:
            retired += [(f"{t}/{f}", stamp) for t, parts in b.files.items() for f in parts]
            retired.append((f"{DIR}/{b.id}.covers.json", stamp))
        new = Generation(gen.number + 1, (*keep, batch), tuple(retired))
        publish(root, new)  # the switch: readers see the new set from here on
        report.batch, report.runs = batch_id, len(covers.get("runs", []))
        if grace <= 0:
            cleaned, n, _ = _cleanup(root, new, grace, dt.datetime.now(dt.UTC))
            report.deleted += n
            if cleaned != new:
                publish(root, cleaned)
                new = cleaned
        report.waiting = _waiting(root, new, grace, dt.datetime.now(dt.UTC))
    return report


def _waiting(root: Path, gen: Generation, grace: float, now: dt.datetime) -> int:
    n = sum(1 for _, since in gen.retired if _age_s(since, now) < grace)
    for b in gen.batches:
        if not b.swept:
            n += sum(len(v) * (3 if k == "runs" else 1) for k, v in batch_covers(root, b.id).items())
    return n


# --- background compaction by recorders -------------------------------------------------------------
def threshold() -> int:
    """EVALB_COMPACT_THRESHOLD as a number (0 = off; a value that is not a number is off, warned once)."""
    raw = os.environ.get(THRESHOLD_ENV, "").strip()
    if not raw:
        return 0
    try:
        return max(0, int(raw))
    except ValueError:
        if raw not in _warned:
            _warned.add(raw)
            log.warning("%s=%r is not a number of runs; background compaction is off", THRESHOLD_ENV, raw)
        return 0


_warned: set[str] = set()


def spawn_background(root: Path) -> subprocess.Popen[bytes]:
    """Start `python -m evalb.compact ROOT --background` detached (it exits at once if another
    compaction holds the lock); the recorder does not wait for it."""
    return subprocess.Popen(
        [sys.executable, "-m", "evalb.compact", str(root), "--background"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )


def _main(argv: list[str]) -> int:
    from evalb.archive import Archive

    logging.basicConfig(format="%(message)s")  # the background entry point: messages through logging
    if len(argv) < 1:
        log.error("usage: python -m evalb.compact ARCHIVE [--background]")
        return 2
    try:
        archive = Archive.open(argv[0])
        background = "--background" in argv[1:]
        compact(archive, wait=not background, min_runs=threshold() if background else 1)
    except Exception as e:
        log.error("error: compaction of %s failed: %s: %s", argv[0], type(e).__name__, e)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
