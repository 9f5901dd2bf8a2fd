-- R scenarios with match=content (R3): every content pattern occurs somewhere in the agent's text
-- (case-insensitive), e.g. both 'UTC' and 'ISO-8601' for the timestamp convention. NULL otherwise.
CREATE OR REPLACE TEMP VIEW states_content AS
WITH wanted AS (
    SELECT r.run_id, p.pattern
    FROM runs r
    JOIN scenario_meta m ON m.variant = r.variant
    JOIN scenario_patterns p ON p.variant = r.variant AND p.role = 'content'
    WHERE m.kind = 'retrieval' AND m.match = 'content'
),
found AS (
    SELECT w.run_id, w.pattern, min(t.seq) AS seq
    FROM wanted w
    LEFT JOIN assistant_text t ON t.run_id = w.run_id AND regexp_matches(t.text, w.pattern, 'i')
    GROUP BY w.run_id, w.pattern
),
per_run AS (
    SELECT run_id,
           bool_and(seq IS NOT NULL) AS ok,
           list_sort(list_distinct(list(seq) FILTER (WHERE seq IS NOT NULL))) AS evidence,
           string_agg(pattern, ', ' ORDER BY pattern) FILTER (WHERE seq IS NULL) AS missing
    FROM found GROUP BY run_id
)
SELECT
    r.run_id,
    p.ok,
    coalesce(p.evidence, []::BIGINT[]) AS evidence,
    CASE WHEN p.run_id IS NULL THEN NULL
         WHEN p.ok THEN 'stated the decision''s content (seq ' || array_to_string(p.evidence, ',') || ')'
         ELSE 'did not state: ' || p.missing
    END AS reason
FROM runs r LEFT JOIN per_run p ON p.run_id = r.run_id;
