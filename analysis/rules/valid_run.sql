-- Validity: is this run a fair measurement at all? Invalid runs are counted apart, never scored.
-- In order of precedence: the variant is unknown to scenarios/; the recorder was interrupted (the
-- session was cut by us, not ended by the agent); no successful SessionStart hook_response (the
-- hook note, one of the two discovery paths under test, never reached the model); the model never
-- took a turn (crash, auth/API error, timeout before any assistant event); the client reports
-- `completed` but wrote no result event (a truncated transcript cannot be scored fairly).
-- A client fault (crashed, client_error: API/auth errors, dropped or stalled streams) makes a run
-- invalid whenever it happens, before or after the model's first turn: it is never the model's
-- FAIL. A run that timed out after the model's first turn (the agent kept working) is scored as
-- it stands. The model's first turn is a real assistant event: the client writes made-up ones
-- (model "<synthetic>", text "API Error: ...") for API failures, and runs.reached_model (the
-- recorder's view) leaves those out, so both must agree. A rep that ran into a per-rep resource
-- limit (memory, processes, /tmp, file size: runner/limits.py) is invalid too, whenever it happened.
CREATE OR REPLACE TEMP VIEW valid_run AS
WITH hooks AS (
    SELECT run_id,
           min(seq) FILTER (WHERE coalesce(json_extract_string(raw, '$.outcome'), 'success') = 'success'
                              AND coalesce(json_extract_string(raw, '$.exit_code'), '0') = '0') AS ok_seq,
           min(seq) AS any_seq
    FROM events
    WHERE type = 'system' AND subtype = 'hook_response'
      AND json_extract_string(raw, '$.hook_event') = 'SessionStart'
    GROUP BY run_id
),
turns AS (
    SELECT run_id,
           min(seq) FILTER (WHERE type = 'assistant') AS first_assistant,
           max(seq) FILTER (WHERE type = 'result') AS last_result
    FROM events
    WHERE type IN ('assistant', 'result')
    GROUP BY run_id
)
SELECT
    r.run_id,
    reason IS NULL AS ok,
    CASE WHEN h.ok_seq IS NOT NULL THEN [h.ok_seq] ELSE []::BIGINT[] END AS evidence,
    reason
FROM runs r
LEFT JOIN scenario_meta m ON m.variant = r.variant
LEFT JOIN hooks h ON h.run_id = r.run_id
LEFT JOIN turns t ON t.run_id = r.run_id,
LATERAL (SELECT CASE
    WHEN m.variant IS NULL THEN 'unknown variant ' || r.variant || ' (no scenario file defines it)'
    WHEN r.outcome = 'interrupted' THEN 'interrupted: the recorder stopped before the rep ended'
    WHEN r.outcome IN ('crashed', 'client_error') THEN r.outcome || ': ' || coalesce(r.outcome_detail, 'no detail')
    WHEN r.outcome = 'resource_limit' THEN 'resource_limit: ' || coalesce(r.outcome_detail, 'a per-rep limit was reached')
    WHEN h.any_seq IS NULL THEN 'no SessionStart hook_response: the hook note never reached the model'
    WHEN h.ok_seq IS NULL THEN 'SessionStart hook failed (seq ' || h.any_seq || ')'
    WHEN t.first_assistant IS NULL OR NOT coalesce(r.reached_model, TRUE) THEN r.outcome || ' before the model''s first turn'
    WHEN r.outcome = 'completed' AND t.last_result IS NULL THEN 'completed without a result event'
END AS reason) AS v;
