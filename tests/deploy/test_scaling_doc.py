"""docs/scaling.md's DuckDB queries run as written on a real archive and count what they say."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

import duckdb
import polars as pl

from tests.deploy.s3server import golden_archive

DOC = (Path(__file__).resolve().parents[2] / "docs" / "scaling.md").read_text()


def queries(root: Path) -> list[str]:
    blocks = re.findall(r"```sql\n(.*?)```", DOC, re.S)
    assert len(blocks) == 2
    text = "\n".join(blocks).replace("'archive/", f"'{root}/")
    return [q for q in text.split(";") if "SELECT" in q]


def test_rate_limit_queries_count_api_retry_events(tmp_path: Path) -> None:
    root = golden_archive(tmp_path / "a")
    events = pl.read_parquet(str(root / "events" / "*.parquet"))
    run_a, run_b = sorted(events["run_id"].unique())
    at = dt.datetime(2026, 12, 1, 3, 1, tzinfo=dt.UTC)

    def retry(run_id: str, seq: int, status: int) -> dict[str, object]:
        line = {"type": "system", "subtype": "api_retry", "attempt": 1, "error_status": status}
        return {
            "run_id": run_id,
            "seq": 10_000 + seq,
            "type": "system",
            "subtype": "api_retry",
            "received_at": at,
            "raw": json.dumps(line),
            "malformed": False,
        }

    rows = [retry(run_a, 0, 429), retry(run_a, 1, 429), retry(run_b, 0, 529)]
    extra = pl.DataFrame(rows).cast(
        {"received_at": events.schema["received_at"], "seq": events.schema["seq"]}
    )
    pl.concat([events.head(0), extra], how="diagonal").write_parquet(root / "events" / "retries.parquet")

    load, retries, share = (duckdb.sql(q).pl() for q in queries(root))
    assert load["reps"].sum() == 2 and "requests_per_rep_minute" in load.columns
    assert retries.select("rate_limited", "api_retries", "reps_retrying").row(0) == (2, 3, 2)
    assert retries.height == 1
    assert share["share_of_reps_retrying"].to_list() == [0.0] * share.height
