"""Grids: scenarios × models × reps (× arms, interleaved), resumable, run with J reps at once, with a
progress display."""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import json
import logging
import os
import random
import re
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout
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
from runner.budget import Budget
from runner.client import NO_RETRY
from runner.confine import require_bwrap
from runner.environment import credentials_for_real_model
from runner.record import DEFAULT_ARM, Identity, RecordOptions, check_client, identity, record_rep, slot_key
from runner.scripted.policies import parse_model
from runner.scripted.server import ModelServer

log = logging.getLogger(__name__)

#: Outcomes after which a rep is tried again at once (the model never spoke: nothing to score).
RETRYABLE = {"client_error", "timeout"}

#: Default circuit breaker: the grid stops after this many consecutive reps failed the same way
#: before reaching the model (0 = never).
BREAKER = 5


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread: it ends a grid the way Ctrl-C does."""


class StopEvent(threading.Event):
    """The grid's stop request, with what made it (said in the detail of the reps it interrupts)."""

    def __init__(self) -> None:
        super().__init__()
        self.reason: str | None = None

    def stop(self, reason: str) -> None:
        if not self.is_set():
            self.reason = reason
        self.set()


def stop_reason(e: BaseException) -> str:
    if isinstance(e, Terminated):
        return "SIGTERM"
    if isinstance(e, KeyboardInterrupt):
        return "Ctrl-C"
    return f"the recorder failed: {type(e).__name__}: {' '.join(str(e).split())}"[:200]


class GridFile(BaseModel):
    """A grid described in a small YAML file: `scenarios`, `models`, `reps`, and optionally the arms
    (`plugins`: name -> plugin directory, or null for no plugin) and the `seed` of their order."""

    model_config = ConfigDict(extra="forbid")

    scenarios: list[str] = Field(default_factory=lambda: ["all"])
    models: list[str]
    reps: int = Field(1, ge=1)
    plugins: dict[str, str | None] | None = None
    seed: int | None = Field(None, ge=0)


def load_grid_file(path: Path) -> GridFile:
    """Read and check a grid file; every mistake is one UsageError naming the field and the fix."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise UsageError(f"cannot read grid file {path}: {e.strerror}") from e
    except UnicodeDecodeError as e:
        raise UsageError(f"grid file {path} is not UTF-8 text") from e
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or "not valid YAML"
        raise UsageError(
            f"grid file {path} is not valid YAML{where}: {problem}", hint="see docs/runner.md for the format"
        ) from e
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UsageError(f"grid file {path} is not a mapping", hint=GRID_EXAMPLE)
    try:
        return GridFile.model_validate(data)
    except ValidationError as e:
        raise UsageError(f"grid file {path}: {_grid_problem(e, data)}", hint=GRID_EXAMPLE) from None


GRID_EXAMPLE = "write e.g. scenarios: [R1, R2], models: [haiku], reps: 3"
_GRID_FIELDS = ("scenarios", "models", "reps", "plugins", "seed")


def _grid_problem(e: ValidationError, data: dict) -> str:
    """The first mistake in a grid file, named by its field (an unknown key first: it explains a missing one)."""
    errors = sorted(e.errors(), key=lambda err: err["type"] != "extra_forbidden")
    err = errors[0]
    field = ".".join(str(p) for p in err["loc"]) or "(top level)"
    if err["type"] == "extra_forbidden":
        near = difflib.get_close_matches(str(field).lower(), _GRID_FIELDS, n=1, cutoff=0.6)
        return f"unknown key {field!r}" + (f", did you mean {near[0]!r}?" if near else "")
    if err["type"] == "missing":
        return f"the key {field!r} is missing"
    if err["type"] == "list_type":
        return f"{field!r} must be a list, got {type(data.get(err['loc'][0])).__name__}"
    return f"{field!r}: {err['msg']}"


@dataclass(frozen=True)
class Slot:
    variant: str
    model: str
    rep: int
    key: str
    arm: str = DEFAULT_ARM
    #: position in the grid's interleaved order (None: a grid of one arm, in plan order)
    position: int | None = None


def _variants_checked(scenarios: list[str], models: list[str]) -> list[str]:
    """The variants the scenario names mean, in order, after checking the scripted model names."""
    variants: list[str] = []
    for s in scenarios:
        ids = all_variant_ids() if s.lower() == "all" else [resolve_variant(s)[1].id]
        variants += [v for v in ids if v not in variants]
    for m in models:
        if m.startswith("scripted:"):
            parse_model(m)
    return variants


def _rep_indices(reps: int | Sequence[int]) -> list[int]:
    if isinstance(reps, int):
        if reps < 1:
            raise UsageError(f"--reps must be at least 1, got {reps}")
        return list(range(reps))
    out = sorted(set(reps))
    if not out or out[0] < 0:
        raise UsageError(f"rep indices must be 0 or more, and at least one, got {list(reps)}")
    return out


def expand(
    scenarios: list[str], models: list[str], reps: int | Sequence[int], plugin_hash: str
) -> list[Slot]:
    """Every slot of a one-plugin grid (the 'default' arm), validating scenario and model names first.

    `reps` is a count, or the rep indices to run (e.g. `range(30, 40)` adds reps to the cells)."""
    indices = _rep_indices(reps)
    variants = _variants_checked(scenarios, models)
    return [Slot(v, m, r, slot_key(v, m, plugin_hash, r)) for m in models for v in variants for r in indices]


# --- arms ------------------------------------------------------------------------------------------
_ARM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")


@dataclass(frozen=True)
class Arm:
    """One plugin variant of a grid: its name (runs.arm) and plugin directory (None: no plugin)."""

    name: str
    plugin_dir: Path | None

    @property
    def plugin_hash(self) -> str | None:
        return None if self.plugin_dir is None else plugin_hash_of(self.plugin_dir)


def arms_from(plugins: dict[str, str | None], base: Path) -> list[Arm]:
    """The arms a grid file's `plugins:` mapping names; a relative directory is taken from `base`
    (the grid file's folder). Each mistake is one UsageError naming the arm."""
    if not plugins:
        raise UsageError("plugins: names no arm", hint="write e.g. plugins: {current: DIR, none: null}")
    arms = []
    for name, raw in plugins.items():
        if not _ARM_NAME.match(name):
            raise UsageError(
                f"arm name {name!r} in plugins: is not a short name",
                hint="use letters, digits, '_', '-' or '.' (at most 40), e.g. current, candidate, none",
            )
        if raw is None:
            arms.append(Arm(name, None))
            continue
        path = Path(raw).expanduser()
        path = path if path.is_absolute() else base / path
        if not path.is_dir():
            raise UsageError(
                f"arm {name!r}: plugin directory {path} does not exist",
                hint="give the plugin's root directory (relative paths are from the grid file's folder), "
                "or null for no plugin",
            )
        manifest.plugin_identity(path)  # a readable plugin (FixtureError names the fix)
        arms.append(Arm(name, path))
    return arms


def new_seed() -> int:
    """A fresh seed for a grid file that names none (it is recorded on every run)."""
    return secrets.randbelow(2**31)


def expand_arms(
    scenarios: list[str], models: list[str], reps: int | Sequence[int], arms: Sequence[Arm], seed: int
) -> list[Slot]:
    """Every slot of a grid of several arms, interleaved in a random order fixed by `seed`.

    The reps of one (variant, model, rep) across the arms form a block: the blocks are shuffled,
    and the arms within each block, so paired arms run close together in time (same client, same
    API conditions) and no arm always goes first. `reps` is a count, or the rep indices to run
    (e.g. `range(30, 40)` to add reps to cells later). Slot keys keep today's key for an arm named
    'default' and add the arm's name for any other."""
    indices = _rep_indices(reps)
    variants = _variants_checked(scenarios, models)
    return _interleave([(v, m, r) for m in models for v in variants for r in indices], arms, seed)


def expand_cells(
    cells: Sequence[tuple[str, str, Sequence[int]]], arms: Sequence[Arm], seed: int
) -> list[Slot]:
    """Slots for chosen cells only, each (variant, model, rep indices), every arm, interleaved as
    `expand_arms` does: what a later round runs to add reps where they are needed, e.g.
    `run_grid(expand_cells([("R1", "haiku", range(10, 14))], arms, seed), archive, options, arms=arms)`."""
    blocks: list[tuple[str, str, int]] = []
    for variant, model, reps in cells:
        v = _variants_checked([variant], [model])[0]
        blocks += [(v, model, r) for r in _rep_indices(reps) if (v, model, r) not in blocks]
    return _interleave(blocks, arms, seed)


def _interleave(blocks: list[tuple[str, str, int]], arms: Sequence[Arm], seed: int) -> list[Slot]:
    names = [a.name for a in arms]
    if not arms or len(set(names)) != len(names):
        raise UsageError(f"a grid needs arms with distinct names, got {names}")
    hashes = {a.name: a.plugin_hash for a in arms}
    rng = random.Random(seed)
    rng.shuffle(blocks)
    slots: list[Slot] = []
    for v, m, r in blocks:
        order = list(arms)
        rng.shuffle(order)
        for a in order:
            slots.append(Slot(v, m, r, slot_key(v, m, hashes[a.name], r, a.name), a.name, len(slots)))
    return slots


def arm_options(options: RecordOptions, arms: Sequence[Arm]) -> dict[str, RecordOptions]:
    """The record options of each arm: the grid's, with the arm's plugin directory and name."""
    if not arms:
        return {options.arm: options}
    return {a.name: dataclasses.replace(options, plugin_dir=a.plugin_dir, arm=a.name) for a in arms}


def check_arms(arms: Sequence[Arm], archive: Archive) -> dict[str, Identity]:
    """Each arm's identity, after refusing (one UsageError naming the part) arms whose frozen-part
    manifests differ in anything but the plugin, now or against the runs of the same arm names
    already in the archive; an arm whose plugin changed since its recorded runs is refused too.

    Against recorded runs only the parts that shape a rep count (fixture, scenarios in both
    manifests): the rubric and the rules apply when scoring, to every run alike."""
    idents = {a.name: identity(RecordOptions(plugin_dir=a.plugin_dir, arm=a.name)) for a in arms}
    if len(arms) < 2 and all(a.name == DEFAULT_ARM for a in arms):
        return idents
    first = arms[0].name
    for a in arms[1:]:
        parts = _differing(idents[first].frozen, idents[a.name].frozen)
        if parts:
            raise UsageError(
                f"arms {first!r} and {a.name!r} differ in the frozen part {parts[0]!r} (only the plugin may differ)",
                hint="record arms from one checkout of the fixture, scenarios, rubric and rules",
            )
    for arm, digest, stored in _recorded_arms(archive, {a.name for a in arms}):
        now = idents[arm]
        if digest != now.plugin_hash:
            raise UsageError(
                f"arm {arm!r}: its plugin changed since its runs in {archive.root} were recorded "
                f"({(digest or 'no plugin')[:12]} -> {(now.plugin_hash or 'no plugin')[:12]})",
                hint="give the changed wording a new arm name, or record into a new archive",
            )
        parts = _differing(stored, now.frozen, recorded=True)
        if parts:
            raise UsageError(
                f"arm {arm!r}: the frozen part {parts[0]!r} differs from the one its runs in "
                f"{archive.root} were recorded with (only the plugin may differ between arms)",
                hint="record into a new archive, or restore that part",
            )
    return idents


#: Frozen parts that apply at scoring time, to every run alike (not compared with recorded runs).
SCORING_PARTS = frozenset({"judge_rubric", "checker_rules"})


def _differing(a: dict[str, str], b: dict[str, str], *, recorded: bool = False) -> list[str]:
    """Parts (not the plugin) whose hashes differ; against recorded runs, of the parts that shape a
    rep and that both manifests name (a scenario added since does not count)."""
    if recorded:
        keep = (a.keys() & b.keys()) - SCORING_PARTS
        a, b = {k: a[k] for k in keep}, {k: b[k] for k in keep}
    return [p for p in manifest.diff_manifests(a, b) if p != "plugin"]


def _recorded_arms(archive: Archive, names: set[str]) -> list[tuple[str, str | None, dict[str, str]]]:
    """(arm, plugin_hash, frozen manifest) of one recorded run of each named arm in the archive."""
    if not archive.exists() or archive.schema_version() < 3 or not archive.has_rows("runs"):
        return []
    import polars as pl

    runs = (
        archive.scan("runs")
        .select("arm", "plugin_hash", "manifest_json", "source")
        .filter(
            pl.col("arm").is_in(sorted(names - {DEFAULT_ARM}))
            & (pl.col("source") == "record")
            & pl.col("manifest_json").is_not_null()
        )
        .unique(["arm", "plugin_hash", "manifest_json"], keep="first", maintain_order=True)
        .collect()
    )
    return [(r["arm"], r["plugin_hash"], json.loads(r["manifest_json"])) for r in runs.iter_rows(named=True)]


@dataclass
class GridReport:
    """What a grid run did."""

    planned: int = 0
    skipped: int = 0
    recorded: list[RunRecord] = field(default_factory=list)
    busy: int = 0  # slots another live recorder was working on
    recovered: list[str] = field(default_factory=list)
    #: (slot, reason) of reps that failed in the harness: recorded as `harness_error` where the
    #: archive could take the row, and said here either way
    failed: list[tuple[str, str]] = field(default_factory=list)
    #: set when the circuit breaker stopped the grid: why (outcome and reason of the last failure)
    stopped_by_breaker: str | None = None
    #: slots the breaker left unrecorded (neither started nor filled)
    not_started: int = 0


def failure_key(run: RunRecord) -> str | None:
    """How a rep failed before the model spoke (outcome + normalised reason), or None if it did not.

    Numbers, ids and paths vary from one rep to the next; they are blanked so that the same cause
    gives the same key."""
    if run.reached_model or run.outcome not in RETRYABLE | {"harness_error"}:
        return None
    return f"{run.outcome}: {normalise_reason(run.outcome_detail)}"


def normalise_reason(detail: str) -> str:
    text = " ".join(detail.split())
    text = re.sub(r"(/[\w.@+-]+)+", "<path>", text)
    text = re.sub(r"\b(?=[\w-]*\d)[\w-]{8,}\b", "<id>", text)  # request ids, run ids, hashes
    text = re.sub(r"\d+\.\d+|\d{4,}", "<n>", text)  # durations, sizes, ports; keeps HTTP statuses
    return text[:160]


class Breaker:
    """Counts consecutive reps that failed the same way before reaching the model; trips at `limit`."""

    def __init__(self, limit: int) -> None:
        self.limit, self.count = limit, 0
        self.key: str | None = None
        self.reason: str | None = None
        self.lock = threading.Lock()

    def add(self, run: RunRecord) -> bool:
        """Count a finished rep (after its retries); True when this one trips the breaker."""
        key = failure_key(run)
        with self.lock:
            if self.limit < 1 or self.reason is not None:
                return False
            self.count = self.count + 1 if key is not None and key == self.key else int(key is not None)
            self.key = key
            if self.count < self.limit:
                return False
            detail = " ".join(run.outcome_detail.split())
            self.reason = (
                f"{self.count} reps in a row failed before reaching the model: {run.outcome}: {detail}"[:400]
            )
            return True

    @property
    def tripped(self) -> bool:
        return self.reason is not None


class Progress:
    """done / total, passes once scored, ETA: one updating line on a terminal, plain lines otherwise."""

    def __init__(self, total: int, stream: TextIO) -> None:
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
            arm = f" [{run.arm}]" if run.arm != DEFAULT_ARM else ""
            what = f"{run.variant} {run.model_alias} rep {run.rep}{arm}: {run.outcome}" + (
                f" {verdict}" if verdict else ""
            )
            if run.outcome != "completed" and run.outcome_detail:
                what += f" ({shorten(run.outcome_detail)})"
            line = f"[{self.done}/{self.total}]{score} · ETA {eta:.0f}s · {what}"
            if self.tty:
                self.stream.write("\r\033[K" + line + ("\n" if self.done == self.total else ""))
            else:
                self.stream.write(line + "\n")
            self.stream.flush()

    def note(self, text: str) -> None:
        """A line of its own under the progress line (the grid's stop by the circuit breaker)."""
        with self.lock:
            self.stream.write(("\n" if self.tty else "") + text + "\n")
            self.stream.flush()


def shorten(text: str, width: int = 100) -> str:
    """One line of at most `width` characters."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def preflight(
    slots: list[Slot], archive: Archive, options: RecordOptions, arms: Sequence[Arm] = ()
) -> dict[str, Identity]:
    """Every check that can refuse a grid, made before the archive is touched: the client binary,
    bubblewrap (unless opted out), credentials for real models, free space in the archive, the
    arms' frozen parts (`check_arms`). Returns each arm's identity."""
    check_client(options.client)
    if options.confine:
        require_bwrap()
    if any(not s.model.startswith("scripted:") for s in slots):
        credentials_for_real_model(os.environ)
    idents = check_arms(arms, archive) if arms else {options.arm: identity(options)}
    unknown = sorted({s.arm for s in slots} - idents.keys())
    if unknown:
        raise UsageError(f"slots name arm {unknown[0]!r}, which the grid does not define")
    archive.check_space()
    return idents


def run_grid(
    slots: list[Slot],
    archive: Archive,
    options: RecordOptions,
    *,
    jobs: int = 1,
    retries: int = 2,
    backoff: float = 2.0,
    after_rep: Callable[[RunRecord], str | None] | None = None,
    progress_stream: TextIO | None = None,
    stop: threading.Event | None = None,
    breaker: int = BREAKER,
    budget: Budget | None = None,
    arms: Sequence[Arm] = (),
    seed: int | None = None,
    shard: str | None = None,
    plan_extra: dict[str, object] | None = None,
) -> GridReport:
    """Record every slot not yet filled; `after_rep` may score a rep and return its verdict.

    Slots run in the order given (`expand_arms` interleaves the arms of a grid); each runs with its
    arm's plugin (`arms`; none given: the one plugin of `options`, arm 'default'). A slot list may
    name any rep indices, so later rounds can add reps to chosen cells. `seed`, the slot's
    position, `shard` and `plan_extra` (e.g. a sequential round) are stored in each run's options_json.

    Reps run in worker threads (even with jobs=1), so the main thread stays free to take Ctrl-C:
    it then sets `stop`, which ends every running client at once (their reps are committed as
    `interrupted`, with their lines and what stopped them), drops the reps not yet started, and
    re-raises. A rep that fails in the harness is recorded as `harness_error` (see `record_rep`)
    and listed in the report's `failed`; the grid goes on.

    Circuit breaker: once `breaker` reps in a row (0 = never) failed the same way before reaching
    the model (same outcome, same reason up to numbers and ids: no network, no credentials, a
    broken client), the reps not yet started are skipped (reps already running finish and are
    recorded) and the report says why in `stopped_by_breaker`, with `not_started`.

    `budget` (runner.budget) is asked before each rep starts and fed each attempt recorded: once it
    refuses, no more reps start (those running finish and are committed); it keeps the count."""
    if jobs < 1:
        raise UsageError(f"--jobs must be at least 1, got {jobs}")
    if breaker < 0:
        raise UsageError(f"--breaker must be 0 (off) or more, got {breaker}")
    idents = preflight(slots, archive, options, arms)
    per_arm = arm_options(options, arms)
    archive.ensure()
    stop = stop or StopEvent()
    report = GridReport(planned=len(slots), recovered=archive.recover_stale())
    filled = archive.committed_slots()
    todo = [s for s in slots if s.key not in filled]
    report.skipped = len(slots) - len(todo)
    if not todo:
        return report
    progress = Progress(len(todo), progress_stream) if progress_stream else None
    needs_server = any(s.model.startswith("scripted:") for s in todo)
    server = ModelServer().start() if needs_server else None
    lock = threading.Lock()
    trip = Breaker(breaker)

    def one(slot: Slot) -> None:
        if stop.is_set():
            return
        if trip.tripped:
            with lock:
                report.not_started += 1
            return
        if budget is not None and not budget.admit(slot.key, slot.model):
            return
        try:
            run = rep(slot)
        except Exception as e:  # the harness failed around the rep (record_rep records its own)
            reason = f"harness error: {type(e).__name__}: {' '.join(str(e).split())}"[:400]
            with lock:
                report.failed.append((slot.key, reason))
            log.warning("%s %s rep %s: %s", slot.variant, slot.model, slot.rep, reason)
            return
        finally:
            if budget is not None:
                budget.release(slot.key)
        if run is None or run.outcome == "interrupted":
            return
        if trip.add(run):
            report.stopped_by_breaker = trip.reason
            if progress:
                progress.note(f"stopping the grid (circuit breaker): {shorten(trip.reason or '', 300)}")
        if run.outcome == "harness_error":
            with lock:
                report.failed.append((slot.key, run.outcome_detail))
        verdict = None
        if after_rep and run.outcome != "harness_error":
            try:
                verdict = after_rep(run)
            except Exception as e:  # scoring is a convenience here: the rep is committed
                log.warning("scoring run %s failed: %s: %s", run.run_id, type(e).__name__, e)
        if progress:
            progress.update(run, verdict)

    def rep(slot: Slot) -> RunRecord | None:
        with archive.slot_lock(slot.key) as mine:
            if not mine or slot.key in archive.committed_slots():
                with lock:
                    report.busy += not mine
                    report.skipped += mine
                return None
            attempt = archive.attempts(slot.key) + 1
            plan: dict[str, object] = {}
            if seed is not None or slot.position is not None:
                plan = {"grid_seed": seed, "order": slot.position}
            if shard is not None:
                plan["shard"] = shard
            plan |= plan_extra or {}
            for i in range(retries + 1):
                run = record_rep(
                    slot.variant,
                    slot.model,
                    slot.rep,
                    archive,
                    per_arm[slot.arm],
                    server=server,
                    attempt=attempt + i,
                    ident=idents[slot.arm],
                    stop=stop,
                    plan=plan,
                )
                with lock:
                    report.recorded.append(run)
                if budget is not None:
                    budget.charge(run)
                if not _retry(run) or i == retries or stop.wait(backoff * (2**i)):
                    break
            return run

    pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="rep")
    futures = [pool.submit(one, s) for s in todo]
    try:
        for f in futures:
            # a timed wait keeps the main thread able to take KeyboardInterrupt at once
            while True:
                try:
                    f.result(timeout=0.2)
                    break
                except FuturesTimeout:
                    continue
    except BaseException as e:
        if isinstance(stop, StopEvent):
            stop.stop(stop_reason(e))
        else:
            stop.set()
        pool.shutdown(wait=True, cancel_futures=True)
        # every rep has ended; commit any journal still without its runs row (lock now free)
        with contextlib.suppress(Exception):
            archive.recover_stale()
        raise
    finally:
        pool.shutdown(wait=True)
        if server:
            server.stop()
    return report


def _retry(run: RunRecord) -> bool:
    """Try the rep again? Only if the model never spoke and another try could go better."""
    return run.outcome in RETRYABLE and not run.reached_model and NO_RETRY not in run.outcome_detail


def plugin_hash_of(plugin_dir: Path | None) -> str | None:
    return None if plugin_dir is None else manifest.plugin_identity(plugin_dir)[2]
