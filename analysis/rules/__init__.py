"""The checker's rules, declared once here: name, engine, axis and role, in execution order.

Each rule yields one relation named like the rule, one row per run in scope with `ok`, `evidence`
(event seq numbers) and `reason`, so every verdict can point back at the events that decided it.
Engines:
- `sql`: `<name>.sql` defines the view (`CREATE OR REPLACE TEMP VIEW <name> AS ...`);
- `python`: `<name>.py` has `rule(con) -> polars.DataFrame | None`; a frame is registered as the
  table `<name>` (None: the function created the relation itself, as `verdict` does).
Inputs are the tables the checker registers: `runs`, `events` and `artifacts` (the archive,
restricted to the runs being scored), `shell_ops` (what each Bash command reads, lists,
searches, writes or runs, parsed by `shell.py`), `scenario_meta` and `scenario_patterns` (from
scenarios/*.md, so a new scenario needs no rule change; an O scenario's done checks are its rows of
role done_present / done_absent, with the file in `path`) and, for `verdict` only,
`judge_verdicts`. Roles say what a rule is to the verdict, which `verdict.py` builds from this
table: adding a rule = its source file, one line here, and its cases file (cases/<name>.yaml).
Every *.sql and *.py file here is part of the checker hash. `consulted.py` is the Polars twin of
the `consulted` rule (tests/checker/test_engines.py); `prose.py`, `rows.py` and `shell.py` are helpers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Engine = Literal["sql", "python"]
Role = Literal[
    "helper",  # a view other rules read (no verdict role)
    "validity",  # the run is a fair measurement at all (exactly one)
    "axis_a",  # unprompted consultation; all axis_a rules must hold
    "cite",  # R, match=id: the answer cites the correct ADR
    "content",  # R, match=content: the answer states the decision's content
    "conflict",  # R: a further requirement (NULL = not applicable)
    "distractor",  # R: a further requirement (NULL = not applicable)
    "new_adr",  # W: the deterministic part
    "task_done",  # O: the task itself was done (axis (b) of an over-triggering scenario)
    "needless",  # O: needless consultation or written proposal (the judge adds prose proposals)
    "judge_input",  # W: what the judge reads when new_adr fails; O: when needless does not hold
    "verdict",  # the verdict itself, run after the judge has answered
]


@dataclass(frozen=True)
class RuleSpec:
    """One rule of the checker: its file is `<name>.<engine suffix>` in the rules directory."""

    name: str
    engine: Engine
    role: Role
    axis: Literal["", "a", "b"] = ""

    @property
    def filename(self) -> str:
        return f"{self.name}.{'sql' if self.engine == 'sql' else 'py'}"


#: Execution order. The judge_input rule feeds the judge; the verdict runs after it has answered.
RULES: tuple[RuleSpec, ...] = (
    RuleSpec("macros", "sql", "helper"),
    RuleSpec("assistant_text", "sql", "helper"),
    RuleSpec("tool_calls", "sql", "helper"),
    RuleSpec("valid_run", "sql", "validity"),
    RuleSpec("consulted", "sql", "axis_a", "a"),
    RuleSpec("cites_correct", "python", "cite", "b"),
    RuleSpec("states_content", "python", "content", "b"),
    RuleSpec("flags_conflict", "python", "conflict", "b"),
    RuleSpec("no_live_distractor", "python", "distractor", "b"),
    RuleSpec("new_adr", "sql", "new_adr", "b"),
    RuleSpec("task_done", "sql", "task_done", "b"),
    RuleSpec("needless", "sql", "needless", "a"),
    RuleSpec("final_message", "sql", "judge_input", "b"),
    RuleSpec("verdict", "python", "verdict"),
)
#: Roles of further R requirements: each must hold where it applies (ok NULL = not applicable).
REQUIREMENT_ROLES: tuple[str, ...] = ("conflict", "distractor")


def by_role(role: str) -> list[RuleSpec]:
    """The declared rules with this role, in order."""
    return [r for r in RULES if r.role == role]


JUDGE_INPUT = by_role("judge_input")[0].name
FINAL = by_role("verdict")[0].name
