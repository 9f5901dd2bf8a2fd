"""Merge archives (`evalb archive merge SRC... DEST`): the union of their runs, events, artifacts,
judgements and scores, written into DEST as compacted batches, each published atomically.

Checked first, before anything is written: every archive has this evalb's schema (else: migrate
first), and all were recorded with the same frozen parts except the plugin (arms differ by plugin).
Then a run id present in several archives is written once (its rows must be identical, else it is
reported and left out), and a grid slot that two different committed runs fill (from different
archives; runs that do not fill a slot, see UNFILLED, never conflict) is reported and not written,
unless `keep` says which to keep. Runs are added in batches of up to CHUNK_RUNS runs (one sorted
part file per table) that become visible together by the compaction manifest's atomic switch (the
archive's commit protocol for many runs: the batch files first, the manifest naming them last), so
DEST is a valid archive at every instant, and rerunning after a kill finishes the job (runs
already in DEST are skipped; judgement and score rows already there too).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from evalb import compact
from evalb.archive import UNFILLED, Archive, utcnow, write_parquet_atomic
from evalb.errors import ArchiveError, UsageError
from evalb.manifest import diff_manifests
from evalb.schema import polars_schema, to_frame

KEEP = ("first", "last", "both")
#: Rows that are the same judgement or score (a copy of one), for deduplication.
ROW_KEYS = {
    "judgements": ("run_id", "rubric_hash", "judge", "judged_at"),
    "scores": ("run_id", "checker_hash", "scored_at"),
}
#: Runs per batch a merge publishes (one part file per table each; bounds its memory).
CHUNK_RUNS = compact.PART_RUNS


@dataclass
class SlotConflict:
    slot: str
    runs: list[tuple[str, str]]  # (archive, run id) of the committed runs filling the slot
    kept: str | None = None  # the archive whose runs were kept ('both' for all); None: none written


@dataclass
class MergeReport:
    dest: str
    added_runs: int = 0
    present_runs: int = 0
    added_rows: dict[str, int] = field(default_factory=dict)
    conflicts: list[SlotConflict] = field(default_factory=list)
    differing: list[tuple[str, list[str]]] = field(default_factory=list)  # run id, archives

    @property
    def ok(self) -> bool:
        return not self.differing and all(c.kept is not None for c in self.conflicts)

    def text(self) -> str:
        rows = ", ".join(f"{n} {t} rows" for t, n in sorted(self.added_rows.items()))
        out = [
            f"merged into {self.dest}: {self.added_runs} runs added, {self.present_runs} already there"
            + (f"; {rows} added" if rows else "")
        ]
        for c in self.conflicts:
            runs = ", ".join(f"{rid} in {a}" for a, rid in c.runs)
            if c.kept is None:
                out.append(f"conflict: slot {c.slot} is filled by different runs ({runs}); not written")
            elif c.kept == "both":
                out.append(f"conflict: slot {c.slot} ({runs}): kept both (--keep both)")
            else:
                out.append(f"conflict: slot {c.slot} ({runs}): kept the runs of {c.kept}")
        for rid, where in self.differing:
            out.append(f"conflict: run {rid} differs between {' and '.join(where)}; not written")
        return "\n".join(out) + "\n"


def _open_source(path: Path) -> Archive:
    try:
        return Archive.open(path)
    except ArchiveError as e:
        hint = e.hint
        if hint and "migrate" in hint:
            hint = f"migrate it first: {hint.removeprefix('run: ')}"
        raise type(e)(f"cannot merge {path}: {e}", hint=hint) from e


def _frozen(runs: pl.DataFrame) -> dict[str, dict[str, str]]:
    """The distinct frozen-part manifests of an archive's runs without the plugin part, by their
    JSON text (runs without a manifest, e.g. fabricated ones, are not compared)."""
    out: dict[str, dict[str, str]] = {}
    for text in runs["manifest_json"].drop_nulls().unique().to_list():
        try:
            m = json.loads(text)
        except ValueError:
            m = {"manifest_json": text}
        if not isinstance(m, dict):
            m = {"manifest_json": text}
        m = {str(k): str(v) for k, v in m.items() if k != "plugin"}
        out[json.dumps(m, sort_keys=True)] = m
    return out


def check_frozen(named: list[tuple[str, pl.DataFrame]]) -> None:
    """Refuse a merge that would mix runs recorded with different frozen parts (but the plugin):
    allowed only if the union of the manifests is what one of the archives already holds."""
    sets = [(name, _frozen(runs)) for name, runs in named]
    union: dict[str, dict[str, str]] = {}
    for _, s in sets:
        union.update(s)
    if any(set(s) >= set(union) for _, s in sets):
        return
    ref_name, ref = next((n, s) for n, s in sets if s)
    for name, s in sets:
        for key, m in s.items():
            if key not in ref:
                base = next(iter(ref.values()))
                parts = ", ".join(diff_manifests(base, m))
                raise UsageError(
                    f"cannot merge: {ref_name} and {name} were recorded with different frozen parts "
                    f"({parts}); archives may differ only by plugin (their arms)",
                    hint="merge archives recorded from the same fixture, scenarios, rubric and rules",
                )


def _hashes(runs: pl.DataFrame, cols: list[str]) -> dict[str, int]:
    df = runs.select([c for c in cols if c in runs.columns])
    return dict(zip(df["run_id"].to_list(), df.hash_rows(seed=7).to_list(), strict=True))


class _Source:
    """Where each run's rows are in a source: its own small file, or a compacted batch."""

    def __init__(self, archive: Archive) -> None:
        self.archive = archive
        self.small: dict[str, dict[str, str]] = {}
        self.batches: dict[str, list[str]] = {}
        for t in compact.RUN_TABLES:
            files = archive.files(t)
            self.small[t] = {
                Path(f).name.removesuffix(".parquet"): f
                for f in files
                if not Path(f).name.startswith(compact.PREFIX)
            }
            self.batches[t] = [f for f in files if Path(f).name.startswith(compact.PREFIX)]

    def copy_runs(self, dest: Archive, ids: list[str], chunk_runs: int) -> None:
        """Add the runs `ids` (sorted) to `dest` as compacted batches of up to `chunk_runs` runs,
        each published atomically (the compaction manifest's switch): a batch is all there or
        not at all, so DEST is a valid archive at every instant."""
        for i in range(0, len(ids), chunk_runs):
            chunk = ids[i : i + chunk_runs]
            frames = {t: self._rows(t, chunk) for t in compact.RUN_TABLES}
            got = set(frames["runs"]["run_id"].to_list())
            if got != set(chunk):
                missing = sorted(set(chunk) - got)[0]
                raise ArchiveError(f"run {missing} of {self.archive.root} vanished while merging")
            compact.add_batch(dest.root, frames, {"runs": chunk})

    def _rows(self, table: str, chunk: list[str]) -> pl.DataFrame:
        frames = []
        small = [self.small[table][r] for r in chunk if r in self.small[table]]
        if small:
            frames.append(compact._scan_small(small))
        need = [r for r in chunk if r not in self.small[table]]
        if need and self.batches[table]:
            rid = pl.col("run_id")  # ids sorted: the range lets row groups be skipped
            frames.append(
                pl.scan_parquet(self.batches[table], glob=False, missing_columns="insert").filter(
                    (rid >= need[0]) & (rid <= need[-1]) & rid.is_in(need)
                )
            )
        if not frames:
            return to_frame(table, [])
        return pl.concat(frames, how="diagonal_relaxed").collect()


def _resolve(
    conflict: SlotConflict, by_input: dict[int, set[str]], names: list[str], keep: str | None
) -> int | None:
    """The input whose runs fill the slot after the merge (-1: all of them), or None if unresolved."""
    if keep == "both":
        conflict.kept = "both"
        return -1
    if keep is None:
        return None
    order = sorted(by_input)
    chosen = order[0] if keep == "first" else order[-1]
    if 0 in by_input and not by_input[0] <= by_input[chosen]:
        return None  # DEST (input 0) already holds other runs: a merge never removes runs
    conflict.kept = names[chosen]
    return chosen


def merge(
    sources: Sequence[Path | str], dest: Path | str, *, keep: str | None = None, chunk_runs: int = CHUNK_RUNS
) -> MergeReport:
    """Merge `sources` into `dest` (created if missing or empty); see the module docstring."""
    if keep is not None and keep not in KEEP:
        raise UsageError(f"--keep must be one of {', '.join(KEEP)}, got {keep!r}")
    if not sources:
        raise UsageError("name at least one source archive and the destination", hint="SRC... DEST")
    dest_path = Path(dest)
    srcs: list[Path] = []
    for s in map(Path, sources):
        if s.resolve() == dest_path.resolve():
            raise UsageError(f"{s} is both a source and the destination", hint="merge into another folder")
        if s.resolve() not in {p.resolve() for p in srcs}:
            srcs.append(s)
    archives = [_open_source(s) for s in srcs]
    target = Archive(dest_path)
    dest_exists = target.exists()
    if dest_exists:
        target = _open_source(dest_path)
    else:
        target.refuse_foreign()

    names = [str(dest_path), *map(str, srcs)]
    inputs: list[Archive | None] = [target if dest_exists else None, *archives]
    runs = [a.read("runs") if a is not None else to_frame("runs", []) for a in inputs]
    check_frozen(list(zip(names, runs, strict=True)))

    report = MergeReport(str(dest_path))
    cols = list(polars_schema("runs"))
    hashes = [_hashes(r, cols) for r in runs]
    owner: dict[str, int] = {rid: 0 for rid in hashes[0]}  # run id -> first input holding it
    differing: dict[str, list[str]] = {}
    for i in range(1, len(inputs)):
        for rid, h in hashes[i].items():
            first = owner.setdefault(rid, i)
            if first != i and hashes[first][rid] != h:
                differing.setdefault(rid, [names[first]]).append(names[i])
    report.differing = sorted(differing.items())

    # slots: which input fills each with which committed runs
    filled: dict[str, dict[int, set[str]]] = {}
    for i, r in enumerate(runs):
        rows = r.filter(~pl.col("outcome").is_in(list(UNFILLED)) & pl.col("slot").is_not_null())
        for slot, rid in rows.select("slot", "run_id").iter_rows():
            filled.setdefault(slot, {}).setdefault(i, set()).add(rid)
    chosen: dict[str, int | None] = {}
    for slot, by_input in sorted(filled.items()):
        union = set().union(*by_input.values())
        if len(by_input) < 2 or any(s == union for s in by_input.values()):
            continue
        conflict = SlotConflict(
            slot, [(names[i], rid) for i in sorted(by_input) for rid in sorted(by_input[i])]
        )
        chosen[slot] = _resolve(conflict, by_input, names, keep)
        report.conflicts.append(conflict)

    # what to write: each run id once, from the first input holding it
    plan: dict[int, list[str]] = {}
    written = set(hashes[0])
    for i in range(1, len(inputs)):
        rows = runs[i].select("run_id", "slot")
        for rid, slot in rows.iter_rows():
            if rid in written or owner[rid] != i or rid in differing:
                continue
            if slot in chosen:
                pick = chosen[slot]
                if pick is None or (pick != -1 and rid not in _runs_of(runs[pick], slot)):
                    continue  # a conflicting slot: not written, or another input's runs kept
            plan.setdefault(i, []).append(rid)
            written.add(rid)
    report.present_runs = sum(1 for r in set().union(*(set(h) for h in hashes[1:])) if r in hashes[0])

    target.ensure()  # checks passed: create DEST if needed
    target.sweep_temp_files()
    for i, ids in sorted(plan.items()):
        src = inputs[i]
        assert src is not None
        _Source(src).copy_runs(target, sorted(ids), chunk_runs)
        report.added_runs += len(ids)
    for table in ("judgements", "scores"):
        report.added_rows[table] = _merge_rows(
            table, target, [a for a in inputs[1:] if a is not None], written
        )
    return report


def _runs_of(runs: pl.DataFrame, slot: str) -> set[str]:
    return set(runs.filter(pl.col("slot") == slot)["run_id"].to_list())


def _merge_rows(table: str, dest: Archive, sources: list[Archive], run_ids: set[str]) -> int:
    """Add the judgement or score rows of the sources for runs in DEST that DEST lacks (one new
    file); rows with the same key (ROW_KEYS) are one row."""
    keys = list(ROW_KEYS[table])
    frames = [a.read(table) for a in sources]
    frames = [f for f in frames if not f.is_empty()]
    if not frames:
        return 0
    schema = polars_schema(table)
    new = (
        pl.concat([f.select([c for c in schema if c in f.columns]) for f in frames], how="diagonal_relaxed")
        .filter(pl.col("run_id").is_in(list(run_ids)))
        .unique(subset=keys, keep="first", maintain_order=True)
    )
    have = dest.read(table, keys)
    if not have.is_empty():
        new = new.join(have, on=keys, how="anti", nulls_equal=True)
    if new.is_empty():
        return 0
    new = new.select(
        [pl.col(c).cast(schema[c]) if c in new.columns else pl.lit(None, schema[c]).alias(c) for c in schema]
    )
    path = dest.table_dir(table) / f"{utcnow():%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:12]}.parquet"
    write_parquet_atomic(new, path)
    return new.height
