"""Grids: scenarios × models × reps, resumable, run with J reps at once, with a progress display."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evalb import manifest
from evalb.archive import Archive
from evalb.errors import UsageError
from evalb.scenarios import all_variant_ids, resolve_variant
from evalb.schema import RunRecord
from runner.client import SessionResult  # noqa: F401 - re-exported for callers' type hints
from runner.record import RecordOptions, check_client, record_rep, slot_key
from runner.scripted.policies import parse_model
from runner.scripted.server import ModelServer

#: Outcomes after which a rep is tried again at once (the model never spoke: nothing to score).
RETRYABLE = {"client_error", "timeout"}


class GridFile(BaseModel):
    """A grid described in a small YAML file: `scenarios`, `models`, `reps`."""

    model_config = ConfigDict(extra="forbid")

    scenarios: list[str] = Field(default_factory=lambda: ["all"])
    models: list[str]
    reps: int = Field(1, ge=1)


def load_grid_file(path: Path) -> GridFile:
    try:
        return GridFile.model_validate(yaml.safe_load(path.read_text()) or {})
    except OSError as e:
        raise UsageError(f"cannot read grid file {path}: {e.strerror}") from e
    except (yaml.YAMLError, ValidationError) as e:
        raise UsageError(f"grid file {path} is not valid: {str(e).splitlines()[0]}") from e


@dataclass(frozen=True)
class Slot:
    variant: str
    model: str
    rep: int
    key: str


def expand(scenarios: list[str], models: list[str], reps: int, plugin_hash: str) -> list[Slot]:
    """Every slot of the grid, validating scenario and model names first."""
    if reps < 1:
        raise UsageError(f"--reps must be at least 1, got {reps}")
    variants: list[str] = []
    for s in scenarios:
        ids = all_variant_ids() if s.lower() == "all" else [resolve_variant(s)[1].id]
        variants += [v for v in ids if v not in variants]
    for m in models:
        if m.startswith("scripted:"):
            parse_model(m)
    return [
        Slot(v, m, r, slot_key(v, m, plugin_hash, r)) for m in models for v in variants for r in range(reps)
    ]


@dataclass
class GridReport:
    """What a grid run did."""

    planned: int = 0
    skipped: int = 0
    recorded: list[RunRecord] = field(default_factory=list)
    busy: int = 0  # slots another live recorder was working on
    recovered: list[str] = field(default_factory=list)


class Progress:
    """done / total, passes once scored, ETA: one updating line on a terminal, plain lines otherwise."""

    def __init__(self, total: int, stream: TextIO = sys.stderr) -> None:
        self.total, self.done, self.passes, self.scored = total, 0, 0, 0
        self.stream = stream
        self.tty = stream.isatty()
        self.t0 = time.monotonic()
        self.lock = threading.Lock()

    def update(self, run: RunRecord, verdict: str | None) -> None:
        with self.lock:
            self.done += 1
            if verdict is not None:
                self.scored += 1
                self.passes += verdict == "PASS"
            elapsed = time.monotonic() - self.t0
            eta = elapsed / self.done * (self.total - self.done)
            score = f" · {self.passes}/{self.scored} pass" if self.scored else ""
            what = f"{run.variant} {run.model_alias} rep {run.rep}: {run.outcome}" + (
                f" {verdict}" if verdict else ""
            )
            line = f"[{self.done}/{self.total}]{score} · ETA {eta:.0f}s · {what}"
            if self.tty:
                self.stream.write("\r\033[K" + line + ("\n" if self.done == self.total else ""))
            else:
                self.stream.write(line + "\n")
            self.stream.flush()


def run_grid(
    slots: list[Slot],
    archive: Archive,
    options: RecordOptions,
    *,
    jobs: int = 1,
    retries: int = 2,
    backoff: float = 2.0,
    after_rep: Callable[[RunRecord], str | None] | None = None,
    progress_stream: TextIO | None = sys.stderr,
) -> GridReport:
    """Record every slot not yet filled; `after_rep` may score a rep and return its verdict."""
    if jobs < 1:
        raise UsageError(f"--jobs must be at least 1, got {jobs}")
    check_client(options.client)
    archive.ensure()
    report = GridReport(planned=len(slots), recovered=archive.recover_stale())
    filled = archive.committed_slots()
    todo = [s for s in slots if s.key not in filled]
    report.skipped = len(slots) - len(todo)
    progress = Progress(len(todo), progress_stream) if progress_stream and todo else None
    needs_server = any(s.model.startswith("scripted:") for s in todo)
    server = ModelServer().start() if needs_server else None
    lock = threading.Lock()

    def one(slot: Slot) -> None:
        with archive.slot_lock(slot.key) as mine:
            if not mine or slot.key in archive.committed_slots():
                with lock:
                    report.busy += not mine
                    report.skipped += mine
                return
            attempt = archive.attempts(slot.key) + 1
            for i in range(retries + 1):
                run = record_rep(
                    slot.variant, slot.model, slot.rep, archive, options, server=server, attempt=attempt + i
                )
                with lock:
                    report.recorded.append(run)
                if run.outcome not in RETRYABLE or run.reached_model or i == retries:
                    break
                time.sleep(backoff * (2**i))
            verdict = after_rep(run) if after_rep else None
            if progress:
                progress.update(run, verdict)

    try:
        if jobs == 1:
            for s in todo:
                one(s)
        else:
            with ThreadPoolExecutor(max_workers=jobs) as pool:
                for f in [pool.submit(one, s) for s in todo]:
                    f.result()
    finally:
        if server:
            server.stop()
    return report


def plugin_hash_of(plugin_dir: Path) -> str:
    return manifest.plugin_identity(plugin_dir)[2]
