"""Input and output of the Python rules: what they read from the rule connection, the frame they return.

A Python rule is `rule(con) -> pl.DataFrame` with `run_id, ok, evidence, reason` (RESULT_SCHEMA);
the checker registers the frame as a table named like the rule. The rules read the agent's text
through the `assistant_text` view and the scenario metadata through `scenario_meta` and
`scenario_patterns`, so they see exactly what the SQL rules see.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

import duckdb
import polars as pl

RESULT_SCHEMA: dict[str, pl.DataType | type[pl.DataType]] = {
    "run_id": pl.String,
    "ok": pl.Boolean,
    "evidence": pl.List(pl.Int64),
    "reason": pl.String,
}


@dataclass
class RunText:
    """One run of a known variant: its scenario metadata and the agent's text, message by message."""

    run_id: str
    variant: str
    kind: str
    match: str
    correct_adr: str | None
    require_conflict: bool
    distractors: list[str]
    messages: list[tuple[int, str]] = field(default_factory=list)
    """(seq, text) in seq order."""


def run_texts(con: duckdb.DuckDBPyConnection, *, retrieval_only: bool = True) -> list[RunText]:
    """Every run whose variant a scenario defines (retrieval scenarios only, by default), with its text."""
    where = "WHERE m.kind = 'retrieval'" if retrieval_only else ""
    meta = con.execute(
        f"""SELECT r.run_id, r.variant, m.kind, m.match, m.correct_adr, m.require_conflict, m.distractors
            FROM runs r JOIN scenario_meta m ON m.variant = r.variant {where} ORDER BY r.run_id"""
    ).fetchall()
    runs = {
        run_id: RunText(run_id, variant, kind, match, correct, bool(conflict), list(distractors or []))
        for run_id, variant, kind, match, correct, conflict, distractors in meta
    }
    if not runs:
        return []
    texts = con.execute(
        f"""SELECT t.run_id, t.seq, t.text FROM assistant_text t
            JOIN runs r ON r.run_id = t.run_id JOIN scenario_meta m ON m.variant = r.variant {where}
            ORDER BY t.run_id, t.seq"""
    ).fetchall()
    for run_id, seq, text in texts:
        runs[run_id].messages.append((int(seq), text))
    return list(runs.values())


def patterns(con: duckdb.DuckDBPyConnection, role: str) -> dict[str, list[re.Pattern[str]]]:
    """variant -> the scenario's compiled patterns of one role (case-insensitive)."""
    out: dict[str, list[re.Pattern[str]]] = defaultdict(list)
    for variant, pattern in con.execute(
        "SELECT variant, pattern FROM scenario_patterns WHERE role = ? ORDER BY variant, pattern", [role]
    ).fetchall():
        out[variant].append(re.compile(pattern, re.I))
    return out


#: One output row: run_id, ok (None = not applicable), evidence seqs, reason.
Row = tuple[str, bool | None, list[int], str | None]


def result(rows: list[Row]) -> pl.DataFrame:
    """The rule's output frame from (run_id, ok, evidence, reason) tuples."""
    return pl.DataFrame(rows, schema=RESULT_SCHEMA, orient="row")
