"""The verdict per run, generated from the rule declaration (analysis/rules/__init__.py: RULES).

Overall PASS = axis (a) AND axis (b); INVALID runs get no axes.
- validity: the `validity` rule; axis (a): every `axis_a` rule holds.
- Axis (b), R: the `cite` rule (match=id) or the `content` rule (match=content, R3) holds, AND
  every requirement rule (roles in REQUIREMENT_ROLES: the conflict is flagged, no superseded
  distractor is cited as live) holds where it applies (ok NULL = not applicable).
- O (overtrigger) scenarios: `needless` = the `needless` rule holds (consulted the ADR system, or
  changed docs/adr) or else the judge answered YES on the final message (a proposal in prose).
  Axis (a) reads "no needless consultation or proposal" (NOT needless), axis (b) is the
  `task_done` rule; PASS = both. The `needless` column carries the boolean for valid O runs
  (NULL for W, R and invalid runs). An O run the judge had to decide and could not is INVALID.
- Axis (b), W: the `new_adr` rule holds, or else the judge answered YES on the `judge_input`
  (`judge_verdicts`, registered by the checker after asking or reusing the judge). A W run that
  only the judge could decide, whose judge gave no YES/NO (ERROR: no credentials, a crash, a
  timeout), is INVALID, not FAIL: the missing verdict is ours, not the model's; ERRORs are not
  cached, so a rescore asks again.
Reasons are `A: ...; B: ...`, the R parts joined by ", " in declaration order; evidence is the
sorted distinct seqs of the deciding rules.
"""

from __future__ import annotations

from collections.abc import Sequence

import duckdb

from analysis.rules import REQUIREMENT_ROLES, RULES, RuleSpec


def _one(rules: Sequence[RuleSpec], role: str) -> str:
    names = [r.name for r in rules if r.role == role]
    if len(names) != 1:
        raise ValueError(f"the rule declaration needs exactly one {role!r} rule, has {names}")
    return names[0]


def _concat(parts: list[str]) -> str:
    """list_concat over any number of lists."""
    out = parts[0]
    for p in parts[1:]:
        out = f"list_concat({out}, {p})"
    return out


def verdict_sql(rules: Sequence[RuleSpec] = RULES) -> str:
    """The `verdict` view, built from the declared roles."""
    valid, cite, content = _one(rules, "validity"), _one(rules, "cite"), _one(rules, "content")
    new, final = _one(rules, "new_adr"), _one(rules, "judge_input")
    done, needless = _one(rules, "task_done"), _one(rules, "needless")
    axis_a = [r.name for r in rules if r.role == "axis_a"]
    reqs = [r.name for r in rules if r.role in REQUIREMENT_ROLES]
    if not axis_a:
        raise ValueError("the rule declaration needs at least one 'axis_a' rule")
    joins = [f"LEFT JOIN {n} a{i} ON a{i}.run_id = r.run_id" for i, n in enumerate(axis_a)]
    joins += [f"LEFT JOIN {n} q{i} ON q{i}.run_id = r.run_id" for i, n in enumerate(reqs)]
    a_ok = " AND ".join(f"coalesce(a{i}.ok, false)" for i in range(len(axis_a)))
    a_ev = _concat([f"coalesce(a{i}.evidence, []::BIGINT[])" for i in range(len(axis_a))])
    a_reason = "concat_ws(', ', " + ", ".join(f"a{i}.reason" for i in range(len(axis_a))) + ")"
    req_cols = "".join(
        f"q{i}.ok AS q{i}_ok, coalesce(q{i}.evidence, []::BIGINT[]) AS q{i}_ev, q{i}.reason AS q{i}_reason,\n"
        for i in range(len(reqs))
    )
    req_ok = "".join(f" AND coalesce(q{i}_ok, true)" for i in range(len(reqs)))
    req_reason = "".join(f", q{i}_reason" for i in range(len(reqs)))
    answer_ev = "CASE WHEN match = 'content' THEN content_ev ELSE cite_ev END"
    b_ev = _concat([answer_ev, *(f"q{i}_ev" for i in range(len(reqs)))])
    return f"""
CREATE OR REPLACE TEMP VIEW verdict AS
WITH parts AS (
    SELECT
        r.run_id, r.scenario, r.variant, r.model_alias, r.plugin_hash, r.rep, r.started_at,
        r.outcome, m.kind, m.match,
        v.ok AS valid, v.reason AS invalid_reason,
        {a_ok} AS a_ok, list_sort(list_distinct({a_ev})) AS a_ev, {a_reason} AS a_reason,
        c.ok AS cite_ok, c.evidence AS cite_ev, c.reason AS cite_reason,
        s.ok AS content_ok, s.evidence AS content_ev, s.reason AS content_reason,
        {req_cols}
        n.ok AS new_ok, n.evidence AS new_ev, n.reason AS new_reason,
        t.ok AS done_ok, t.evidence AS done_ev, t.reason AS done_reason,
        nd.ok AS nd_ok, nd.evidence AS nd_ev, nd.reason AS nd_reason,
        fm.seq AS final_seq, j.verdict AS judge_verdict,
        v.ok AND (
            (m.kind = 'write' AND NOT coalesce(n.ok, false))
            OR (m.kind = 'overtrigger' AND NOT coalesce(nd.ok, false))
        ) AND fm.seq IS NOT NULL
            AND coalesce(j.verdict NOT IN ('YES', 'NO'), true) AS unjudged
    FROM runs r
    JOIN {valid} v ON v.run_id = r.run_id
    LEFT JOIN scenario_meta m ON m.variant = r.variant
    {chr(10).join("    " + j for j in joins).strip()}
    LEFT JOIN {cite} c ON c.run_id = r.run_id
    LEFT JOIN {content} s ON s.run_id = r.run_id
    LEFT JOIN {new} n ON n.run_id = r.run_id
    LEFT JOIN {done} t ON t.run_id = r.run_id
    LEFT JOIN {needless} nd ON nd.run_id = r.run_id
    LEFT JOIN {final} fm ON fm.run_id = r.run_id
    LEFT JOIN judge_verdicts j ON j.run_id = r.run_id
),
checked AS (
    SELECT * REPLACE (
        valid AND NOT unjudged AS valid,
        CASE WHEN unjudged THEN 'the judge gave no verdict on the final message (seq ' || final_seq
                                || '): ' || coalesce(judge_verdict, 'not asked')
             ELSE invalid_reason END AS invalid_reason)
    FROM parts
),
overtrigger AS (
    SELECT * REPLACE (
        CASE WHEN kind = 'overtrigger' THEN NOT needless_ok ELSE a_ok END AS a_ok,
        CASE WHEN kind <> 'overtrigger' THEN a_ev
             WHEN nd_ok THEN coalesce(nd_ev, []::BIGINT[])
             WHEN needless_ok THEN [final_seq]
             ELSE []::BIGINT[] END AS a_ev,
        CASE WHEN kind <> 'overtrigger' THEN a_reason
             WHEN nd_ok OR NOT needless_ok THEN 'A: ' || nd_reason
             ELSE 'A: needless proposal: judge YES on the final message (seq ' || final_seq || ')'
        END AS a_reason)
    FROM (SELECT *, coalesce(nd_ok, false) OR coalesce(judge_verdict = 'YES', false) AS needless_ok
          FROM checked)
),
axes AS (
    SELECT *,
        CASE WHEN NOT valid THEN NULL
             WHEN kind = 'overtrigger' THEN coalesce(done_ok, false)
             WHEN kind = 'retrieval' THEN
                 coalesce(CASE WHEN match = 'content' THEN content_ok ELSE cite_ok END, false){req_ok}
             WHEN kind = 'write' THEN coalesce(new_ok, false) OR coalesce(judge_verdict = 'YES', false)
        END AS axis_b,
        CASE WHEN kind = 'retrieval' THEN concat_ws(', ',
                 CASE WHEN match = 'content' THEN content_reason ELSE cite_reason END{req_reason})
             WHEN kind = 'overtrigger' THEN done_reason
             WHEN new_ok THEN new_reason
             WHEN judge_verdict IS NULL AND final_seq IS NULL THEN new_reason || ', no final message to judge'
             WHEN judge_verdict IS NULL THEN new_reason || ', not judged'
             ELSE new_reason || ', judge ' || judge_verdict || ' on the final message (seq ' || final_seq || ')'
        END AS b_reason,
        CASE WHEN kind = 'retrieval' THEN list_sort(list_distinct({b_ev}))
             WHEN kind = 'overtrigger' THEN coalesce(done_ev, []::BIGINT[])
             WHEN new_ok THEN new_ev
             WHEN final_seq IS NOT NULL THEN [final_seq]
             ELSE []::BIGINT[]
        END AS b_ev
    FROM overtrigger
)
SELECT
    run_id, scenario, variant, model_alias, plugin_hash, rep, started_at,
    valid,
    invalid_reason,
    CASE WHEN valid THEN a_ok END AS axis_a,
    axis_b,
    CASE WHEN valid THEN a_ok AND axis_b END AS passed,
    CASE WHEN valid AND kind = 'overtrigger' THEN needless_ok END AS needless,
    CASE WHEN NOT valid THEN 'INVALID' WHEN a_ok AND axis_b THEN 'PASS' ELSE 'FAIL' END AS verdict,
    CASE WHEN NOT valid THEN 'INVALID: ' || invalid_reason
         ELSE a_reason || '; B: ' || b_reason || CASE WHEN outcome IN ('turn_limit', 'budget_limit')
             THEN '; ' || outcome || ': scored as it stood when the client stopped it' ELSE '' END
    END AS reasons,
    CASE WHEN valid THEN a_ev ELSE []::BIGINT[] END AS evidence_a,
    CASE WHEN valid THEN b_ev ELSE []::BIGINT[] END AS evidence_b
FROM axes
"""


def rule(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(verdict_sql())
