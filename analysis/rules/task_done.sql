-- O scenarios (overtrigger), axis (b): the task was done. Every done check of the scenario
-- (scenario_patterns rows of role done_present / done_absent, grouped by their `path`) holds on the
-- sandbox's end state: the path is a regular file (not a symlink, never followed) that the run
-- added or modified, and its captured content matches every present pattern and no absent one
-- (RE2, case-sensitive unless the pattern says (?i)). A file whose content capture withheld
-- (binary, past a cap: content null) fails its check, absent-only checks included: an end state
-- the checker cannot read is never taken as done. NULL for W and R runs.
-- Evidence: the calls that changed a checked file: Edit/MultiEdit/Write/NotebookEdit on it, or a Bash
-- command naming it that is not an ADR consultation (`consulted` evidence: adr-search README.md is not).
CREATE OR REPLACE TEMP VIEW task_done AS
WITH checks AS (
    SELECT DISTINCT variant, path FROM scenario_patterns WHERE role IN ('done_present', 'done_absent')
),
per_check AS (
    SELECT r.run_id, r.variant, c.path,
           a.path IS NOT NULL AND a.content IS NOT NULL AS changed,
           a.path IS NOT NULL AND a.content IS NULL AS unread,
           coalesce(a.content, '') AS content
    FROM runs r
    JOIN scenario_meta m ON m.variant = r.variant AND m.kind = 'overtrigger'
    JOIN checks c ON c.variant = r.variant
    LEFT JOIN artifacts a ON a.run_id = r.run_id AND a.path = c.path AND a.kind = 'file'
        AND a.change IN ('added', 'modified')
),
problems AS (
    SELECT run_id, path, 0 AS ord,
           CASE WHEN unread THEN path || ' content was not captured (binary or past a cap)'
                ELSE path || ' was not added or modified as a regular file' END AS why
    FROM per_check WHERE NOT changed
    UNION ALL
    SELECT pc.run_id, pc.path, 1, pc.path || ' lacks /' || p.pattern || '/'
    FROM per_check pc
    JOIN scenario_patterns p ON p.variant = pc.variant AND p.path = pc.path AND p.role = 'done_present'
    WHERE pc.changed AND NOT regexp_matches(pc.content, p.pattern)
    UNION ALL
    SELECT pc.run_id, pc.path, 2, pc.path || ' still has /' || p.pattern || '/'
    FROM per_check pc
    JOIN scenario_patterns p ON p.variant = pc.variant AND p.path = pc.path AND p.role = 'done_absent'
    WHERE pc.changed AND regexp_matches(pc.content, p.pattern)
),
first_problem AS (
    SELECT run_id, arg_min(why, ord || ':' || path || ':' || why) AS why FROM problems GROUP BY run_id
),
writes AS (
    SELECT pc.run_id, pc.path, tc.seq
    FROM per_check pc
    JOIN tool_calls tc ON tc.run_id = pc.run_id
    LEFT JOIN consulted c ON c.run_id = tc.run_id
    WHERE (tc.tool_name IN ('Edit', 'MultiEdit', 'Write', 'NotebookEdit')
           AND (tc.file_path = pc.path OR ends_with(tc.file_path, '/' || pc.path)))
       OR (tc.tool_name = 'Bash' AND contains(tc.command, pc.path)
           AND NOT list_contains(coalesce(c.evidence, []::BIGINT[]), tc.seq))
),
touched AS (
    SELECT pc.run_id,
           list_sort(list_distinct(list(w.seq) FILTER (WHERE w.seq IS NOT NULL))) AS evidence,
           string_agg(DISTINCT pc.path, ', ' ORDER BY pc.path) AS paths
    FROM per_check pc
    LEFT JOIN writes w ON w.run_id = pc.run_id AND w.path = pc.path
    GROUP BY pc.run_id
)
SELECT
    r.run_id,
    CASE WHEN m.kind = 'overtrigger' THEN f.run_id IS NULL END AS ok,
    CASE WHEN m.kind = 'overtrigger' AND f.run_id IS NULL THEN coalesce(t.evidence, []::BIGINT[])
         ELSE []::BIGINT[] END AS evidence,
    CASE WHEN m.kind <> 'overtrigger' THEN NULL
         WHEN f.run_id IS NULL THEN 'task done (' || coalesce(t.paths, 'no checks') || ')'
         ELSE 'task not done: ' || f.why
    END AS reason
FROM runs r
JOIN scenario_meta m ON m.variant = r.variant
LEFT JOIN first_problem f ON f.run_id = r.run_id
LEFT JOIN touched t ON t.run_id = r.run_id;
