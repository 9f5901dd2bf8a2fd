"""Axis (a), unprompted consultation, in Polars: the same rule as consulted.sql, in a second engine.

A test runs both over the same events and requires identical `ok` and `evidence` per run, so a
change to one that is not made to the other shows up. The regexes are spelled again here on
purpose (Rust regex instead of RE2): the comparison then also covers the engines' regex semantics.
Bash commands are not re-parsed here: both engines read the same `shell_ops` facts
(analysis/rules/shell.py), so for Bash the comparison covers how each engine judges those facts,
and for every other tool the whole rule.
"""

from __future__ import annotations

import polars as pl

DOCS_ADR = r"(?:^|[^A-Za-z0-9_.-])docs/adr(?:$|[^A-Za-z0-9_.-])"
DOCS_DIR = r"(?:^|/)docs/?$"


def _has(col: str, pattern: str) -> pl.Expr:
    return pl.col(col).str.contains(pattern).fill_null(False)


def consulted(events: pl.LazyFrame, runs: pl.LazyFrame, shell_ops: pl.LazyFrame) -> pl.LazyFrame:
    """One row per run: run_id, ok, evidence (sorted seqs of the tool calls that consulted).

    `shell_ops` is `analysis.rules.shell.shell_ops(events)`: what each Bash command does.
    """
    calls = events.filter((pl.col("block_type") == "tool_use") & (pl.col("tool_name") != "Bash")).select(
        "run_id",
        "seq",
        "tool_name",
        command=pl.col("tool_input").str.json_path_match("$.command"),
        file_path=pl.coalesce(
            pl.col("tool_input").str.json_path_match("$.file_path"),
            pl.col("tool_input").str.json_path_match("$.notebook_path"),
        ),
        search_path=pl.col("tool_input").str.json_path_match("$.path"),
        pattern=pl.col("tool_input").str.json_path_match("$.pattern"),
        skill=pl.col("tool_input").str.json_path_match("$.skill"),
    )
    skill_or_cmd = pl.coalesce("skill", "command", pl.lit(""))
    hit = (
        (pl.col("tool_name").is_in(["Skill", "SlashCommand"]) & skill_or_cmd.str.contains(r"^/?os-adr:"))
        | _has("file_path", DOCS_ADR)
        | _has("search_path", DOCS_ADR)
        | ((pl.col("tool_name") == "Glob") & _has("pattern", DOCS_ADR))
        | (pl.col("tool_name").is_in(["Grep", "Glob"]) & _has("search_path", DOCS_DIR))
        | ((pl.col("tool_name") == "Glob") & _has("pattern", r"^(?:\S*/)?docs/\*\*"))
    )
    bash_hit = (
        (pl.col("op") == "run_cli")
        | _has("path", DOCS_ADR)
        | (pl.col("recursive").fill_null(False) & _has("path", DOCS_DIR))
    )
    seqs = pl.concat(
        [
            calls.filter(hit).select("run_id", pl.col("seq").cast(pl.Int64)),
            shell_ops.filter(bash_hit).select("run_id", pl.col("seq").cast(pl.Int64)),
        ]
    ).unique()
    per_run = seqs.group_by("run_id").agg(evidence=pl.col("seq").sort())
    return (
        runs.select("run_id")
        .join(per_run, on="run_id", how="left")
        .select(
            "run_id",
            ok=pl.col("evidence").is_not_null(),
            evidence=pl.col("evidence").fill_null(pl.lit([], dtype=pl.List(pl.Int64))),
        )
    )
