"""The checker's rules: small named SQL files run in this order over the whole archive at once.

Each file defines one temp view named like the file (`consulted.sql` -> view `consulted`), one row
per run in scope with `ok`, `evidence` (event seq numbers) and `reason`, so every verdict can point
back at the events that decided it. Inputs are the tables the checker registers: `runs`, `events`
and `artifacts` (the archive, restricted to the runs being scored), `scenario_meta` and
`scenario_patterns` (built from scenarios/*.md, so a new scenario needs no rule change) and, for
`verdict` only, `judge_verdicts`. `consulted.py` is the same axis (a) rule in Polars; a test keeps
the two engines in agreement. Every file here is part of the checker hash.
"""

from __future__ import annotations

#: Execution order. `final_message` feeds the judge; `verdict` runs after the judge has answered.
RULES: tuple[str, ...] = (
    "macros",
    "assistant_text",
    "tool_calls",
    "valid_run",
    "consulted",
    "cites_correct",
    "states_content",
    "flags_conflict",
    "no_live_distractor",
    "new_adr",
    "final_message",
    "verdict",
)
JUDGE_INPUT = "final_message"
FINAL = "verdict"
