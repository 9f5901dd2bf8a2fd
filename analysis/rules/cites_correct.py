"""R scenarios: the agent's text cites the scenario's correct ADR as a decision. NULL for W scenarios.

Required for match=id; for match=content (R3) it is evidence only. The forms and what is not a
citation (a number in a URL, a date, a PR/issue/version number, fenced code, "I could not find
ADR-0002") are in `prose.cites`. Cases: cases/cites_correct.yaml.
"""

from __future__ import annotations

from functools import lru_cache

import duckdb
import polars as pl

from . import prose
from .rows import Row, result, run_texts


@lru_cache(maxsize=8192)
def cited_in(text: str, adr_id: str) -> bool:
    """Whether one message cites ADR `adr_id`."""
    if (adr_id.lstrip("0") or "0") not in text:
        return False  # cheap pre-filter: most messages name no ADR at all
    return bool(prose.cites(prose.analyse(text).clean, adr_id))


def rule(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    rows: list[Row] = []
    for run in run_texts(con, retrieval_only=False):
        if run.kind != "retrieval" or not run.correct_adr:
            rows.append((run.run_id, None, [], None))
            continue
        ev = [seq for seq, text in run.messages if cited_in(text, run.correct_adr)]
        reason = f"cited {run.correct_adr} (seq {ev[0]})" if ev else f"did not cite {run.correct_adr}"
        rows.append((run.run_id, bool(ev), ev, reason))
    return result(rows)
