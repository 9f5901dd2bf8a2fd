-- The verdict per run: overall PASS = axis (a) AND axis (b); INVALID runs get no axes.
-- Axis (b): R = (cites the correct ADR, or for match=content states its content) AND the conflict
-- is flagged (when required) AND no superseded distractor is cited as live. W = a new ADR on the
-- topic exists, or else the judge answered YES on the final message (`judge_verdicts`, registered
-- by the checker after asking or reusing the judge). A W run that only the judge could decide,
-- whose judge gave no YES/NO (ERROR: no credentials, a crash, a timeout), is INVALID, not FAIL:
-- the missing verdict is ours, not the model's; ERRORs are not cached, so a rescore asks again.
CREATE OR REPLACE TEMP VIEW verdict AS
WITH parts AS (
    SELECT
        r.run_id, r.scenario, r.variant, r.model_alias, r.plugin_hash, r.rep, r.started_at,
        m.kind, m.match,
        v.ok AS valid, v.reason AS invalid_reason,
        a.ok AS a_ok, a.evidence AS a_ev, a.reason AS a_reason,
        c.ok AS cite_ok, c.evidence AS cite_ev, c.reason AS cite_reason,
        s.ok AS content_ok, s.evidence AS content_ev, s.reason AS content_reason,
        f.ok AS conflict_ok, coalesce(f.evidence, []::BIGINT[]) AS conflict_ev, f.reason AS conflict_reason,
        d.ok AS distr_ok, coalesce(d.evidence, []::BIGINT[]) AS distr_ev, d.reason AS distr_reason,
        n.ok AS new_ok, n.evidence AS new_ev, n.reason AS new_reason,
        fm.seq AS final_seq, j.verdict AS judge_verdict,
        v.ok AND m.kind = 'write' AND NOT coalesce(n.ok, false) AND fm.seq IS NOT NULL
            AND coalesce(j.verdict NOT IN ('YES', 'NO'), true) AS unjudged
    FROM runs r
    JOIN valid_run v ON v.run_id = r.run_id
    LEFT JOIN scenario_meta m ON m.variant = r.variant
    LEFT JOIN consulted a ON a.run_id = r.run_id
    LEFT JOIN cites_correct c ON c.run_id = r.run_id
    LEFT JOIN states_content s ON s.run_id = r.run_id
    LEFT JOIN flags_conflict f ON f.run_id = r.run_id
    LEFT JOIN no_live_distractor d ON d.run_id = r.run_id
    LEFT JOIN new_adr n ON n.run_id = r.run_id
    LEFT JOIN final_message fm ON fm.run_id = r.run_id
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
axes AS (
    SELECT *,
        CASE WHEN NOT valid THEN NULL
             WHEN kind = 'retrieval' THEN
                 coalesce(CASE WHEN match = 'content' THEN content_ok ELSE cite_ok END, false)
                 AND coalesce(conflict_ok, true) AND coalesce(distr_ok, true)
             WHEN kind = 'write' THEN coalesce(new_ok, false) OR coalesce(judge_verdict = 'YES', false)
        END AS axis_b,
        CASE WHEN kind = 'retrieval' THEN concat_ws(', ',
                 CASE WHEN match = 'content' THEN content_reason ELSE cite_reason END,
                 conflict_reason, distr_reason)
             WHEN new_ok THEN new_reason
             WHEN judge_verdict IS NULL AND final_seq IS NULL THEN new_reason || ', no final message to judge'
             WHEN judge_verdict IS NULL THEN new_reason || ', not judged'
             ELSE new_reason || ', judge ' || judge_verdict || ' on the final message (seq ' || final_seq || ')'
        END AS b_reason,
        CASE WHEN kind = 'retrieval' THEN list_sort(list_distinct(list_concat(
                 CASE WHEN match = 'content' THEN content_ev ELSE cite_ev END,
                 conflict_ev, distr_ev)))
             WHEN new_ok THEN new_ev
             WHEN final_seq IS NOT NULL THEN [final_seq]
             ELSE []::BIGINT[]
        END AS b_ev
    FROM checked
)
SELECT
    run_id, scenario, variant, model_alias, plugin_hash, rep, started_at,
    valid,
    invalid_reason,
    CASE WHEN valid THEN a_ok END AS axis_a,
    axis_b,
    CASE WHEN valid THEN a_ok AND axis_b END AS passed,
    CASE WHEN NOT valid THEN 'INVALID' WHEN a_ok AND axis_b THEN 'PASS' ELSE 'FAIL' END AS verdict,
    CASE WHEN NOT valid THEN 'INVALID: ' || invalid_reason
         ELSE a_reason || '; B: ' || b_reason
    END AS reasons,
    CASE WHEN valid THEN a_ev ELSE []::BIGINT[] END AS evidence_a,
    CASE WHEN valid THEN b_ev ELSE []::BIGINT[] END AS evidence_b
FROM axes;
