"""Importing transcripts recorded elsewhere (the old bash harness, the client by hand, other machines).

One process imports many transcripts (`Importer.run`): what every run shares (the frozen-part
manifest, the plugin's identity, the host) is computed once, and the slots already imported are
read once into an index (`ImportIndex`: the `slot` column of the runs files) that each commit
keeps up to date, so importing into a large archive costs one read of one column, not one listing
of every run per transcript. Each transcript is read and parsed in the calling thread while a
committer thread writes the Parquet files of the ones before it (see runner/import_commit.py).

A transcript that cannot be imported (unreadable, no JSON line at all, too large) is reported and
skipped; the others are imported regardless.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalb import __version__, manifest
from evalb import sandbox as sandboxes
from evalb.archive import Archive
from evalb.errors import ArchiveError, EvalbError, UsageError
from evalb.scenarios import Scenario, Variant, resolve_variant
from evalb.schema import RunRecord, run_record
from evalb.transcript import parse_rows
from runner import capture
from runner.client import classify
from runner.import_inputs import ImportItem, check_items

if TYPE_CHECKING:
    import polars as pl

    from runner.import_commit import Committer

#: A transcript larger than this is refused (reported, not imported): it would be held in memory
#: several times over while it is parsed.
MAX_TRANSCRIPT_BYTES = 512 << 20


class BadTranscript(Exception):
    """One transcript cannot be imported; the message says why in one line."""


@dataclass
class Prepared:
    """A transcript parsed into its rows, ready to commit."""

    item: ImportItem
    run: RunRecord
    events: list[dict[str, Any]]
    artifacts: pl.DataFrame | None
    nbytes: int


@dataclass
class ImportResult:
    """What became of one transcript: `run` if imported, `skipped` if already in the archive,
    `error` (one line) if it could not be imported."""

    item: ImportItem
    run: RunRecord | None = None
    skipped: bool = False
    error: str | None = None
    nbytes: int = 0


class ImportIndex:
    """The import slots committed in an archive ('import|variant|model|sha256[:16]'), read once
    from the `slot` column of the runs files and kept up to date by the importer's own commits.

    An imported run's outcome is never `interrupted` or `harness_error` (the outcomes that leave a
    slot unfilled), so a slot present in runs is a slot filled."""

    def __init__(self, archive: Archive) -> None:
        self.archive = archive
        self._slots: set[str] | None = None
        self._lock = threading.Lock()

    def _load(self) -> set[str]:
        import polars as pl

        files = self.archive.files("runs")
        if not files:
            return set()
        # files of older schemas or other column orders (compacted ones) read alike: slot only
        scan = pl.scan_parquet(files, glob=False, missing_columns="insert", extra_columns="ignore")
        slots = scan.select("slot").collect()["slot"]
        return set(slots.filter(slots.str.starts_with("import|")).to_list())

    def __contains__(self, slot: object) -> bool:
        with self._lock:
            if self._slots is None:
                self._slots = self._load()
            return slot in self._slots

    def add(self, slot: str) -> None:
        with self._lock:
            if self._slots is None:
                self._slots = self._load()
            self._slots.add(slot)


class Importer:
    """Imports transcripts into one archive, sharing per-process work across them."""

    def __init__(self, archive: Archive, *, plugin_dir: Path | None = None) -> None:
        archive.ensure()
        self.archive = archive
        self.plugin_dir = plugin_dir
        self.index = ImportIndex(archive)
        self._frozen = manifest.frozen_manifest()
        self._manifest_json = json.dumps(self._frozen, sort_keys=True)
        self._plugin = manifest.plugin_identity(plugin_dir) if plugin_dir else (None, None, None)
        self._host = socket.gethostname()
        self._variants: dict[str, tuple[Scenario, Variant]] = {}
        self._pending: set[str] = set()  # slots queued for commit in this process

    def variant(self, scenario: str) -> tuple[Scenario, Variant]:
        if scenario not in self._variants:
            self._variants[scenario] = resolve_variant(scenario)
        return self._variants[scenario]

    def prepare(self, item: ImportItem, rep: int = 0) -> Prepared | None:
        """Read and parse one transcript; None when its slot is already imported (or queued).
        Raises BadTranscript for a transcript that cannot be imported."""
        sc, variant = self.variant(item.scenario)
        data = _read(item.transcript)
        digest = hashlib.sha256(data).hexdigest()
        slot = f"import|{variant.id}|{item.model}|{digest[:16]}"
        if slot in self._pending or slot in self.index:
            return None
        run_id = uuid.uuid4().hex
        # lines end at b"\n" only (never str.splitlines: NEL or U+2028 inside a JSON string is no
        # line end); a line that is not UTF-8 is kept as base64
        nbytes = len(data)
        events, summary = parse_rows(run_id, data)
        del data
        if summary.n_lines == summary.n_malformed:
            what = "empty" if not summary.n_lines else "binary or not stream-json"
            raise BadTranscript(f"{item.transcript}: no line is a JSON object ({what})")
        exit_code = 0 if summary.result is not None else None
        outcome, detail = classify(exit_code, summary, timed_out=False, timeout=0, stop=[])
        if summary.result is None:
            detail = "imported transcript has no result event (the client was stopped or its output cut)"
        result = summary.result or {}
        mtime = dt.datetime.fromtimestamp(item.transcript.stat().st_mtime, dt.UTC)
        duration = result.get("duration_ms")
        run = run_record(
            summary,
            run_id=run_id,
            slot=slot,
            source="import",
            scenario=sc.id,
            variant=variant.id,
            model_alias=item.model,
            rep=rep,
            attempt=1,
            started_at=mtime,
            ended_at=mtime,
            duration_ms=duration if isinstance(duration, int) and not isinstance(duration, bool) else None,
            exit_code=exit_code,
            outcome=outcome,
            outcome_detail=f"imported from {item.transcript.name}: {detail}",
            client_path="(imported)",
            plugin_name=self._plugin[0],
            plugin_version=self._plugin[1],
            plugin_hash=self._plugin[2],
            plugin_dir=str(self.plugin_dir) if self.plugin_dir else None,
            fixture_hash=self._frozen.get("fixture"),
            scenario_hash=sc.sha256,
            rubric_hash=self._frozen.get("judge_rubric"),
            rules_hash=self._frozen.get("checker_rules"),
            manifest_json=self._manifest_json,
            confinement="n/a (imported)",
            stderr="",
            recorder_version=__version__,
            host=self._host,
            options_json=json.dumps({"imported_from": str(item.transcript), "sha256": digest}),
        )
        arts = None
        if item.sandbox is not None:
            from evalb.schema import to_frame

            # The initial tree comes from the fixture, never from the sandbox (the agent owned it).
            end = capture.collect(run_id, item.sandbox.resolve(), sandboxes.initial_tree(variant.id))
            run = run.model_copy(update={"capture_json": end.summary_json()})
            arts = to_frame("artifacts", end.rows)
        self._pending.add(slot)
        return Prepared(item, run, events, arts, nbytes)

    def run(
        self,
        items: Iterable[ImportItem],
        on_result: Callable[[ImportResult], None] | None = None,
        *,
        batch: int = 32,
    ) -> list[ImportResult]:
        """Import every item (checked first: `check_items`); the results in input order. Each
        failure and skip goes to `on_result` as it happens, each imported run once every run is
        committed. A failure of the archive itself (disk full) ends the import with an
        ArchiveError: the runs committed before it are kept."""
        from runner.import_commit import Committer

        items = list(items)
        check_items(items)
        results: list[ImportResult] = []
        done = on_result or (lambda r: None)
        committer = Committer(self.archive, batch=batch)
        committer.start()
        try:
            for item in items:
                results.append(self._one(item, committer, done))
                committer.check()
        finally:
            try:
                committer.close()
            except ArchiveError as e:
                kept = len(committer.committed)
                raise ArchiveError(f"{e} (the {kept} runs committed before it are kept)", hint=e.hint) from e
        for r in results:
            if r.run is not None:
                self.index.add(r.run.slot)
        self._pending.clear()
        # runs reported after their commit: the committer ran ahead of this loop's reports
        for r in results:
            if r.run is not None:
                done(r)
        return results

    def _one(
        self, item: ImportItem, committer: Committer, done: Callable[[ImportResult], None]
    ) -> ImportResult:
        try:
            size = item.transcript.stat().st_size
            prepared = self.prepare(item)
        except BadTranscript as e:
            res = ImportResult(item, error=str(e))
        except EvalbError as e:  # e.g. a sandbox capture refused
            res = ImportResult(item, error=f"{item.transcript}: {e.one_line()}")
        except (OSError, MemoryError, RecursionError, ValueError, UnicodeError) as e:
            res = ImportResult(item, error=f"{item.transcript}: {type(e).__name__}: {e}")
        else:
            if prepared is None:
                res = ImportResult(item, skipped=True, nbytes=size)
            else:
                committer.put(prepared)
                return ImportResult(item, run=prepared.run, nbytes=size)
        done(res)
        return res


def _read(path: Path) -> bytes:
    try:
        size = os.stat(path).st_size
        if size > MAX_TRANSCRIPT_BYTES:
            raise BadTranscript(
                f"{path}: {size} bytes, more than the {MAX_TRANSCRIPT_BYTES >> 20} MiB a transcript may have"
            )
        return path.read_bytes()
    except OSError as e:
        raise BadTranscript(f"cannot read transcript {path}: {e.strerror}") from e


def import_transcript(
    transcript: Path,
    archive: Archive,
    *,
    scenario: str,
    model: str,
    sandbox: Path | None = None,
    plugin_dir: Path | None = None,
    rep: int = 0,
) -> RunRecord | None:
    """Archive one JSONL transcript (malformed lines kept raw and flagged); None if already imported.
    A transcript that cannot be imported (`BadTranscript`) is a UsageError."""
    item = ImportItem(transcript, scenario, model, sandbox)
    check_items([item])
    importer = Importer(archive, plugin_dir=plugin_dir)
    try:
        prepared = importer.prepare(item, rep)
    except BadTranscript as e:
        raise UsageError(str(e)) from e
    if prepared is None:
        return None
    from runner.import_commit import commit_one

    commit_one(archive, prepared)
    importer.index.add(prepared.run.slot)
    return prepared.run
