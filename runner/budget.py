"""Hard budgets for a grid, and the plan a dry run prints.

`Budget` is consulted by `runner.grid.run_grid` before each rep starts (`admit`) and fed every
attempt it records (`charge`): it stops scheduling once the spend recorded in the result events
(`runs.cost_usd`, the client's own `total_cost_usd`) plus what the reps in flight and the next rep
are projected to cost would pass the limit. Reps already running finish and are committed.

Scripted reps cost nothing: the client prices a scripted model's made-up token counts at a rate of
its own guessing, which is no spend. The one exception is the test-only price: with
`EVALB_TEST_PRICE=1` (honoured only beside `EVALB_TEST_POLICIES=1`, like the test policies)
scripted reps are charged the `total_cost_usd` their result event reports, so the whole real path
(scripted server usage -> client -> result event -> runs.cost_usd -> budget) can be tested.
"""

from __future__ import annotations

import logging
import os
import statistics
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from evalb.archive import Archive
from evalb.errors import PolicyError
from evalb.schema import RunRecord
from runner.scripted.policies import TEST_POLICIES_ENV

log = logging.getLogger(__name__)

#: Test-only: "1" charges scripted reps what their result event reports (see the module's text).
TEST_PRICE_ENV = "EVALB_TEST_PRICE"
#: Outcomes whose cost and duration stand for "one rep" in a projection: reps that ran to their
#: end, the agent's or a client limit's ("completed runs" in the messages).
BASIS_OUTCOMES = ("completed", "turn_limit", "budget_limit")


def scripted_priced() -> bool:
    """Are scripted reps charged (the test-only price)? Refused outside the test suite."""
    if os.environ.get(TEST_PRICE_ENV, "") in ("", "0"):
        return False
    if os.environ.get(TEST_POLICIES_ENV) != "1":
        raise PolicyError(
            f"{TEST_PRICE_ENV} is a test-only price and works only in the test suite "
            f"(with {TEST_POLICIES_ENV}=1)",
            hint=f"unset {TEST_PRICE_ENV}: scripted reps cost nothing",
        )
    return True


def is_charged(model: str, priced: bool) -> bool:
    """Does a rep of `model` cost money? Real models do; scripted ones only under the test price."""
    return priced or not model.startswith("scripted:")


@dataclass
class Past:
    """A model's completed runs in the archive: what one rep cost and took (medians)."""

    costs: list[float] = field(default_factory=list)
    durations_ms: list[float] = field(default_factory=list)

    def cost(self) -> float | None:
        return statistics.median(self.costs) if self.costs else None

    def duration_s(self) -> float | None:
        return statistics.median(self.durations_ms) / 1000 if self.durations_ms else None


def past_runs(archive: Archive) -> dict[str, Past]:
    """model alias -> its completed runs' costs and durations; reads only (an absent archive has none)."""
    if not archive.exists():
        return {}
    archive.check_readable()
    df = archive.read("runs", ["model_alias", "outcome", "cost_usd", "duration_ms"])
    past: dict[str, Past] = {}
    for model, outcome, cost, ms in df.iter_rows():
        if outcome not in BASIS_OUTCOMES:
            continue
        p = past.setdefault(model, Past())
        if cost is not None:
            p.costs.append(float(cost))
        if ms is not None:
            p.durations_ms.append(float(ms))
    return past


class Budget:
    """A grid's spending cap in USD; thread-safe (reps run in worker threads)."""

    def __init__(self, limit_usd: float, past: dict[str, Past], *, priced: bool = False) -> None:
        self.limit = limit_usd
        self.priced = priced
        self.past = {m: Past(list(p.costs), list(p.durations_ms)) for m, p in past.items()}
        self.spent = 0.0
        self.in_flight: dict[str, str] = {}  # slot key -> model of its rep, running
        self.not_started = 0
        self.stopped: str | None = None
        self.lock = threading.Condition()

    def projected(self, model: str) -> float:
        """What the next rep of `model` is expected to cost: the median of its completed reps (past
        and this grid's); 0 for a model that costs nothing or with no basis yet."""
        if not is_charged(model, self.priced):
            return 0.0
        return self.past.get(model, Past()).cost() or 0.0

    def _blind(self, model: str) -> bool:
        """No basis yet for a charged model while one of its reps runs: wait for that rep's cost."""
        return (
            is_charged(model, self.priced)
            and self.past.get(model, Past()).cost() is None
            and model in self.in_flight.values()
        )

    def cost(self, run: RunRecord) -> float:
        """What a finished attempt spent: its result event's total_cost_usd; the projection for one
        that reached the model but left no cost (killed mid-rep); 0 for scripted reps."""
        if not is_charged(run.model_alias, self.priced):
            return 0.0
        if run.cost_usd is not None:
            return float(run.cost_usd)
        return self.projected(run.model_alias) if run.reached_model else 0.0

    def admit(self, slot: str, model: str) -> bool:
        """May the rep of `slot` start? False once the spend so far, the reps in flight and this one
        would pass the limit; from then on every later slot is refused too (and counted)."""
        with self.lock:
            while self.stopped is None and self._blind(model):
                self.lock.wait(timeout=1.0)
            if self.stopped is None:
                nxt = self.projected(model)
                # projections are taken now, not at admission: a rep admitted blind counts once known
                flight = sum(self.projected(m) for m in self.in_flight.values())
                if self.spent + flight + nxt <= self.limit:
                    self.in_flight[slot] = model
                    return True
                n = len(self.in_flight)
                self.stopped = (
                    f"${self.spent:.4f} spent"
                    + (f", ${flight:.4f} projected for {n} rep(s) running" if n else "")
                    + f" and ${nxt:.4f} for the next rep ({model}) would pass ${self.limit:g}"
                )
                log.warning("stopping the grid on its budget: %s", self.stopped)
                self.lock.notify_all()
            self.not_started += 1
            return False

    def charge(self, run: RunRecord) -> None:
        """Count one recorded attempt (every attempt costs, retries too)."""
        with self.lock:
            cost = self.cost(run)
            self.spent += cost
            if run.outcome in BASIS_OUTCOMES and run.cost_usd is not None:
                self.past.setdefault(run.model_alias, Past()).costs.append(cost)
            self.lock.notify_all()

    def release(self, slot: str) -> None:
        """The rep of `slot` has ended (recorded, skipped or failed): its projection is spent or void."""
        with self.lock:
            self.in_flight.pop(slot, None)
            self.lock.notify_all()


# --- the dry run ---------------------------------------------------------------------------------
class SlotLike(Protocol):
    """What the plan reads of a grid slot (runner.grid.Slot); an `arm` too where slots have one."""

    @property
    def variant(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def rep(self) -> int: ...
    @property
    def key(self) -> str: ...


def _what(slot: SlotLike) -> str:
    arm = getattr(slot, "arm", None)
    arm = None if arm == "default" else arm  # a one-plugin grid says nothing of arms
    return f"{slot.variant} {slot.model}" + (f" [{arm}]" if arm else "") + f" rep {slot.rep}"


def plan(
    slots: Sequence[SlotLike],
    archive: Archive,
    *,
    jobs: int = 1,
    budget_usd: float | None = None,
    show: int = 12,
) -> str:
    """What a grid would record, in order, and its projected cost and time from the archive's past
    runs of the same models; reads the archive (if there is one) and writes nothing."""
    filled = archive.committed_slots() if archive.exists() else {}
    past = past_runs(archive)
    priced = scripted_priced()
    todo = [s for s in slots if s.key not in filled]
    models = list(dict.fromkeys(s.model for s in slots))
    arms = list(dict.fromkeys(a for s in slots if (a := getattr(s, "arm", None)) not in (None, "default")))
    cells = {(s.variant, s.model, getattr(s, "arm", None)) for s in slots}
    reps = max((s.rep for s in slots), default=-1) + 1
    head = f"plan: {len(slots)} slots ({len(cells)} cells × up to {reps} reps"
    head += f"; models: {', '.join(models)}" + (f"; arms: {', '.join(arms)}" if arms else "") + ")"
    lines = [head, f"{len(slots) - len(todo)} already recorded, {len(todo)} to record, in this order:"]
    shown = todo if len(todo) <= show + 3 else todo[:show]
    lines += [f"  {i}. {_what(s)}" for i, s in enumerate(shown, 1)]
    if len(shown) < len(todo):
        lines.append(f"  … {len(todo) - len(shown)} more")
    if arms:
        per_arm = {a: sum(getattr(s, "arm", None) == a for s in todo) for a in arms}
        lines.append("per arm: " + ", ".join(f"{a} {n}" for a, n in per_arm.items()))
    total_cost, total_s = 0.0, 0.0
    no_cost: list[str] = []
    no_time: list[str] = []
    for m in models:
        n = sum(s.model == m for s in todo)
        p = past.get(m, Past())
        charged = is_charged(m, priced)
        cost, secs = (p.cost() if charged else 0.0), p.duration_s()
        if cost is None:
            no_cost.append(m)
            price = "cost: no basis"
        else:
            total_cost += n * cost
            price = f"${cost:.4f} each (median of {len(p.costs)})" if charged else "$0 (scripted)"
        if secs is None:
            no_time.append(m)
            took = "time: no basis"
        else:
            total_s += n * secs
            took = f"~{secs:.0f}s each (median of {len(p.durations_ms)})"
        lines.append(f"{m}: {n} reps × {price}, {took}")
    cost_line = (
        f"no basis for {', '.join(no_cost)} (no completed run of it in the archive)"
        if no_cost
        else f"${total_cost:.2f}"
    )
    time_line = (
        f"no basis for {', '.join(no_time)} (no completed run of it in the archive)"
        if no_time
        else f"~{_duration(total_s / max(1, jobs))} with --jobs {jobs}"
    )
    lines += [f"projected cost: {cost_line}", f"projected time: {time_line}"]
    if budget_usd is not None and not no_cost and total_cost > budget_usd:
        lines.append(
            f"--budget-usd {budget_usd:g} will stop the grid before it ends (projected ${total_cost:.2f})"
        )
    elif budget_usd is not None and not no_cost:
        lines.append(f"--budget-usd {budget_usd:g} covers the projected ${total_cost:.2f}")
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
