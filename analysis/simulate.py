"""Grids simulated from known pass rates, without the client: for the honesty tests, demos and notebooks.

`simulate_scores` gives the score frame the library reads (frames.COLUMNS); `write_archive` commits
such a frame as a real archive (runs, a few events per run, scores) so the report and the
notebooks can be exercised end to end. The truth is known, so a test can check that intervals
cover it and that comparisons detect what the power analysis promises.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from analysis.frames import COLUMNS
from evalb.archive import Archive
from evalb.schema import EventRecord, ScoreRecord, run_record

VARIANTS: tuple[str, ...] = ("W1", "W2", "W3", "R1", "R2", "R3", "R4", "R4-nograph")

#: A plausible grid (true pass rates) in the spirit of the first pilot: haiku rarely consults the
#: ADR system unprompted, sonnet usually does; R4-nograph is expected to fail.
DEFAULT_RATES: dict[tuple[str, str], float] = {
    **{(v, "haiku"): r for v, r in zip(VARIANTS, (0.1, 0.05, 0.0, 0.2, 0.15, 0.1, 0.1, 0.0), strict=True)},
    **{(v, "sonnet"): r for v, r in zip(VARIANTS, (0.8, 0.7, 0.3, 0.4, 0.9, 0.75, 0.85, 0.05), strict=True)},
}


def scenario_of(variant: str) -> str:
    """'R4-nograph' -> 'R4' (variants are '<scenario>-<suffix>')."""
    return variant.split("-", 1)[0]


def simulate_counts(
    rates: np.ndarray, reps: int | np.ndarray, n_grids: int, rng: np.random.Generator
) -> np.ndarray:
    """Pass counts, shape (n_grids, n_cells): each cell Binomial(reps, rate) — the fast path for many grids."""
    rates = np.asarray(rates, dtype=float)
    return rng.binomial(reps, rates, size=(n_grids, len(rates)))


def simulate_scores(
    rates: Mapping[tuple[str, str], float] | None = None,
    reps: int = 5,
    seed: int = 0,
    invalid_rate: float = 0.0,
    plugin_hash: str = "sim0",
    axis_a_rates: Mapping[tuple[str, str], float] | None = None,
    cost_usd: Mapping[str, float] | None = None,
) -> pl.DataFrame:
    """A score frame (frames.COLUMNS) for `reps` runs per (variant, model) cell with the given true rates.

    Axis (a) passes with its own rate (default: halfway between the pass rate and 1), and axis (b)
    then passes with the probability that makes P(pass) the cell's rate; a run is INVALID with
    probability `invalid_rate`.
    """
    rates = dict(DEFAULT_RATES if rates is None else rates)
    rng = np.random.default_rng(seed)
    costs = {"haiku": 0.02, "sonnet": 0.12, **(cost_usd or {})}
    t0 = dt.datetime(2026, 7, 3, tzinfo=dt.UTC)
    rows: list[dict[str, Any]] = []
    for (variant, model), p in rates.items():
        q = (axis_a_rates or {}).get((variant, model), (1 + p) / 2)
        q = max(q, p)
        for rep in range(reps):
            valid = bool(rng.random() >= invalid_rate)
            a = bool(rng.random() < q)
            b = bool(rng.random() < (p / q if q > 0 else 0.0)) if a else bool(rng.random() < 0.5)
            passed = a and b
            reasons = "A:consulted" if a else "A:no adr tool use"
            reasons += "; B:correct" if b else "; B:wrong or missing"
            rows.append(
                {
                    "run_id": uuid.UUID(int=int(rng.integers(0, 2**63)) << 64 | len(rows)).hex,
                    "scenario": scenario_of(variant),
                    "variant": variant,
                    "model_alias": model,
                    "plugin_hash": plugin_hash,
                    "rep": rep,
                    "valid": valid,
                    "invalid_reason": None if valid else "no hook_response event",
                    "axis_a": a if valid else None,
                    "axis_b": b if valid else None,
                    "passed": passed if valid else None,
                    "verdict": ("PASS" if passed else "FAIL") if valid else "INVALID",
                    "reasons": reasons if valid else "INVALID: no hook_response event",
                    "evidence_a": [2] if a else [],
                    "evidence_b": [3],
                    "checker_hash": "sim",
                    "cost_usd": float(costs.get(model, 0.05) * rng.lognormal(0, 0.3)),
                    "duration_ms": int(rng.lognormal(11, 0.4)),
                    "input_tokens": int(rng.integers(2_000, 40_000)),
                    "output_tokens": int(rng.integers(200, 4_000)),
                    "started_at": t0 + dt.timedelta(minutes=len(rows)),
                    "outcome": "completed",
                    "plugin_name": "os-adr",
                    "plugin_version": "0.0.0-sim",
                }
            )
    schema = _schema()
    return pl.DataFrame(rows, schema=schema).select(COLUMNS)


def _schema() -> dict[str, pl.DataType]:
    from evalb.schema import polars_schema

    runs, scores = polars_schema("runs"), polars_schema("scores")
    return {c: scores[c] if c in scores else runs[c] for c in COLUMNS}


def _events(row: dict) -> list[EventRecord]:
    """Five events per run: init, the hook note, an ADR tool call (or a plain Read), the answer, result."""
    rid = row["run_id"]

    def ev(seq: int, **kw: object) -> EventRecord:
        base = {
            "run_id": rid, "seq": seq, "block_index": None, "type": None, "subtype": None,
            "message_id": None, "role": None, "block_type": None, "tool_name": None,
            "tool_use_id": None, "tool_input": None, "text": None, "is_error": None,
            "parent_tool_use_id": None, "is_synthetic": None, "malformed": False,
            "received_at": row["started_at"], "raw": json.dumps({"seq": seq}),
        }  # fmt: skip
        return EventRecord(**{**base, **kw})

    tool = (
        {"tool_name": "Bash", "tool_input": json.dumps({"command": "bin/adr-search --topic persistence"})}
        if row["axis_a"]
        else {"tool_name": "Read", "tool_input": json.dumps({"file_path": "lib/relay/delivery.rb"})}
    )
    answer = "This conflicts with ADR 0002; propose recording a new ADR." if row["axis_b"] else "Done."
    return [
        ev(0, type="system", subtype="init"),
        ev(1, type="system", subtype="hook_response", text="[os-adr] decisions live in docs/adr/"),
        ev(2, type="assistant", role="assistant", block_index=0, block_type="tool_use", **tool),
        ev(3, type="assistant", role="assistant", block_index=0, block_type="text", text=answer),
        ev(4, type="result", subtype="success", text=answer),
    ]


def write_archive(root: Path | str, scores: pl.DataFrame) -> Archive:
    """Commit a simulated score frame as an archive at `root`: a runs row and events per run, then scores."""
    archive = Archive(root)
    archive.ensure()
    score_rows = []
    for row in scores.iter_rows(named=True):
        run = run_record(
            run_id=row["run_id"],
            slot=f"{row['variant']}|{row['model_alias']}|{row['plugin_hash']}|{row['rep']}",
            source="selftest", scenario=row["scenario"], variant=row["variant"],
            model_alias=row["model_alias"], model_id=f"sim-{row['model_alias']}", rep=row["rep"],
            attempt=1, started_at=row["started_at"],
            ended_at=row["started_at"] + dt.timedelta(milliseconds=row["duration_ms"]),
            duration_ms=row["duration_ms"], exit_code=0, outcome=row["outcome"],
            outcome_detail="simulated", reached_model=True, hook_seen=bool(row["valid"]),
            hook_note=None, client_version=None, client_path="(simulated)", session_id=None,
            result_subtype="success", num_turns=2, cost_usd=row["cost_usd"],
            input_tokens=row["input_tokens"], output_tokens=row["output_tokens"],
            cache_read_tokens=0, cache_creation_tokens=0, api_retries=0,
            plugin_name=row["plugin_name"], plugin_version=row["plugin_version"],
            plugin_hash=row["plugin_hash"], plugin_dir=None, fixture_hash=None, scenario_hash=None,
            rubric_hash=None, rules_hash=None, manifest_json=None, confinement="n/a", stderr="",
            n_lines=5, n_malformed=0, recorder_version="sim", host="sim", options_json="{}",
        )  # fmt: skip
        archive.commit_run(run, _events(row), [])
        score_rows.append(
            ScoreRecord(
                scored_at=row["started_at"] + dt.timedelta(hours=1),
                **{k: row[k] for k in ScoreRecord.model_fields if k != "scored_at" and k in row},
            )
        )
    archive.append_rows("scores", score_rows)
    return archive


def simulate_arms(
    arms: Mapping[str, Mapping[tuple[str, str], float]],
    reps: int = 5,
    seed: int = 0,
    needless: Mapping[str, Mapping[tuple[str, str], float]] | None = None,
) -> pl.DataFrame:
    """A score frame of several arms recorded in one interleaved grid: frames.COLUMNS plus `arm`.

    `arms` maps an arm's name to its true pass rates per (variant, model) cell; each arm gets its
    own plugin hash ('sim-<arm>'). Reps are interleaved in a random order fixed by `seed` (their
    `started_at`). With `needless` (arm -> cell -> rate), those cells are over-triggering
    scenarios: their rows carry a boolean `needless` (null on every other row)."""
    parts = []
    for i, (arm, rates) in enumerate(arms.items()):
        cells = {**rates, **{c: 1 - r for c, r in (needless or {}).get(arm, {}).items()}}
        df = simulate_scores(cells, reps=reps, seed=seed * 1000 + i, plugin_hash=f"sim-{arm}")
        parts.append(df.with_columns(arm=pl.lit(arm)))
    out = pl.concat(parts)
    rng = np.random.default_rng(seed)
    t0 = dt.datetime(2026, 7, 3, tzinfo=dt.UTC)
    # Interleave: rep r of every cell and arm runs in round r, in a shuffled order within the round.
    order = out.select(pl.col("rep"), key=pl.Series(rng.random(out.height))).with_row_index("i")
    order = order.sort(["rep", "key"]).with_row_index("pos").sort("i")
    out = out.with_columns(started_at=pl.lit(t0) + pl.duration(minutes=pl.lit(order["pos"])))
    if needless:
        over = pl.lit(False)
        for arm, over_cells in needless.items():
            for variant, model in over_cells:
                over = over | (
                    (pl.col("arm") == arm) & (pl.col("variant") == variant) & (pl.col("model_alias") == model)
                )
        # An over-triggering run passes when it does nothing needless: needless = not passed.
        out = out.with_columns(
            needless=pl.when(over & pl.col("valid")).then(~pl.col("passed")).otherwise(None)
        )
    return out
