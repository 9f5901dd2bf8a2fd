"""Axis (a) in SQL (consulted.sql) and in Polars (consulted.py) agree on the same events."""

from __future__ import annotations

import polars as pl

from analysis.rules.consulted import consulted
from analysis.rules.shell import shell_ops
from evalb.archive import read_table
from tests.checker.helpers import Runs, hooked
from tests.checker.test_consulted_cases import CASES, case_lines
from tests.checker.test_rules import CONSULT_CASES, consult_lines


def test_sql_and_polars_agree(tmp_path) -> None:
    """Every run of the axis (a) corpora (plus a sub-agent and a multi-hit run) gets the same ok and evidence."""
    runs = Runs(tmp_path)
    for name, tool, tool_input, _ in CONSULT_CASES:
        runs.add(name, consult_lines(tool, tool_input))
    for case in CASES:
        runs.add(f"case-{case['name']}", case_lines(case))
    b = hooked()
    b.bash("ls docs/adr").read("docs/adr/0002-x.md").bash("adr-search --topic x")
    tid = b.task("look")
    b.bash("grep -rn x docs/", parent=tid)
    b.result("ok")
    runs.add("many", b.lines)

    sql = pl.DataFrame(list(runs.rule("consulted").values())).select("run_id", "ok", "evidence")
    events = read_table(runs.archive.root, "events")
    pol = consulted(
        events.lazy(), read_table(runs.archive.root, "runs").lazy(), shell_ops(events).lazy()
    ).collect()
    sql = sql.with_columns(pl.col("evidence").cast(pl.List(pl.Int64))).sort("run_id")
    pol = pol.sort("run_id")
    assert sql.to_dicts() == pol.to_dicts()
    # The comparison is not vacuous: both directions and a multi-seq evidence list occur.
    assert set(pol["ok"].to_list()) == {True, False}
    assert pol.filter(pl.col("run_id") == runs.ids["many"])["evidence"].to_list() == [[3, 5, 7, 10]]
