-- Validity: is this run a fair measurement at all? Invalid runs are counted apart, never scored.
-- In order of precedence: the variant is unknown to scenarios/; the recorder was interrupted (the
-- session was cut by us, not ended by the agent); no successful SessionStart hook_response carrying
-- the plugin's marker (its hook note, one of the two discovery paths under test, never reached the
-- model; another plugin's note does not count); the model never took a turn (crash, auth/API
-- error, timeout before any assistant event); the client reports
-- `completed` but wrote no result event (a truncated transcript cannot be scored fairly).
-- A client or harness fault (crashed, client_error: API/auth errors, dropped or stalled streams;
-- harness_error: the recorder itself failed; any other outcome but completed/timeout) makes a run
-- invalid whenever it happens, before or after the model's first turn: it is never the model's
-- FAIL. A run that timed out after the model's first turn (the agent kept working) is scored as
-- it stands. The model's first turn is a real assistant event: the client writes made-up ones
-- (model "<synthetic>", text "API Error: ...") for API failures, and runs.reached_model (the
-- recorder's view) leaves those out, so both must agree. A rep that ran into a per-rep resource
-- limit (memory, processes, /tmp, file size: runner/limits.py) is invalid too, whenever it happened.
-- A rep the client stopped at a limit we passed it (turn_limit: --max-turns; budget_limit:
-- --max-budget-usd) is scored as it stands, like a timeout while the agent worked: the limit is
-- part of the recorded configuration (options_json), and dropping such reps would raise the pass
-- rate of a wording that makes agents run long (the verdict's reasons name the limit).
-- Per arm: a run of a no-plugin arm (a named arm, runs.arm <> 'default', recorded without a plugin:
-- plugin_hash NULL) is the baseline. No hook note is expected there; instead any SessionStart
-- hook_response makes it invalid (something hooked into a session that should have had no plugin, so
-- it is no baseline). Everything else applies to every arm alike, and a valid no-plugin run is scored
-- on both axes. A 'default' run without a plugin identity (an import) still needs the '[os-adr]' note.
CREATE OR REPLACE TEMP VIEW valid_run AS
WITH hook_lines AS (
    -- The plugin's note: a successful SessionStart hook_response whose context carries the marker the
    -- plugin declares by its name ('[' || plugin.json name || ']', recorded as runs.plugin_name;
    -- '[os-adr]' for a run recorded without a plugin identity). The context is the hook's stdout
    -- JSON hookSpecificOutput.additionalContext, or its plain stdout when that is not JSON.
    -- Another plugin's hook note does not make the run valid.
    SELECT e.run_id, e.seq,
           coalesce(json_extract_string(e.raw, '$.outcome'), 'success') = 'success'
               AND coalesce(json_extract_string(e.raw, '$.exit_code'), '0') = '0' AS succeeded,
           coalesce(json_extract_string(e.raw, '$.stdout'), json_extract_string(e.raw, '$.output'), '') AS out,
           '[' || coalesce(r.plugin_name, 'os-adr') || ']' AS marker
    FROM events e JOIN runs r ON r.run_id = e.run_id
    WHERE e.type = 'system' AND e.subtype = 'hook_response'
      AND json_extract_string(e.raw, '$.hook_event') = 'SessionStart'
),
no_plugin AS (
    SELECT run_id FROM runs WHERE arm <> 'default' AND plugin_hash IS NULL
),
hooks AS (
    SELECT run_id,
           min(seq) FILTER (WHERE succeeded AND contains(
               CASE WHEN json_valid(out)
                   THEN coalesce(json_extract_string(out, '$.hookSpecificOutput.additionalContext'), '')
                   ELSE out END, marker)) AS ok_seq,
           min(seq) FILTER (WHERE NOT succeeded) AS failed_seq,
           min(seq) AS any_seq,
           any_value(marker) AS marker
    FROM hook_lines
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
LEFT JOIN turns t ON t.run_id = r.run_id
LEFT JOIN no_plugin np ON np.run_id = r.run_id,
LATERAL (SELECT CASE
    WHEN m.variant IS NULL THEN 'unknown variant ' || r.variant || ' (no scenario file defines it)'
    WHEN r.outcome = 'interrupted' THEN 'interrupted: the recorder stopped before the rep ended'
    WHEN r.outcome = 'resource_limit' THEN 'resource_limit: ' || coalesce(r.outcome_detail, 'a per-rep limit was reached')
    WHEN r.outcome NOT IN ('completed', 'timeout', 'turn_limit', 'budget_limit') THEN r.outcome || ': ' || coalesce(r.outcome_detail, 'no detail')
    WHEN np.run_id IS NOT NULL AND h.any_seq IS NOT NULL THEN 'a SessionStart hook ran (seq ' || h.any_seq
        || ') in a run of the no-plugin arm ' || r.arm || ': it is no baseline'
    WHEN np.run_id IS NULL AND h.any_seq IS NULL THEN 'no SessionStart hook_response: the hook note never reached the model'
    WHEN np.run_id IS NULL AND h.ok_seq IS NULL AND h.failed_seq IS NOT NULL THEN 'SessionStart hook failed (seq ' || h.failed_seq || ')'
    WHEN np.run_id IS NULL AND h.ok_seq IS NULL THEN 'no SessionStart hook note from the plugin (' || h.marker || ' marker): the hook_response at seq '
        || h.any_seq || ' does not carry it'
    WHEN t.first_assistant IS NULL OR NOT coalesce(r.reached_model, TRUE) THEN r.outcome || ' before the model''s first turn'
    WHEN r.outcome = 'completed' AND t.last_result IS NULL THEN 'completed without a result event'
END AS reason) AS v;
