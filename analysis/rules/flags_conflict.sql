-- R scenarios with require_conflict: the agent's text flags that the request conflicts with the
-- decision (any conflict pattern, case-insensitive). NULL where not required.
CREATE OR REPLACE TEMP VIEW flags_conflict AS
WITH needed AS (
    SELECT r.run_id, r.variant
    FROM runs r JOIN scenario_meta m ON m.variant = r.variant
    WHERE m.kind = 'retrieval' AND m.require_conflict
),
hits AS (
    SELECT n.run_id, list(DISTINCT t.seq) AS evidence
    FROM needed n
    JOIN scenario_patterns p ON p.variant = n.variant AND p.role = 'conflict'
    JOIN assistant_text t ON t.run_id = n.run_id AND regexp_matches(t.text, p.pattern, 'i')
    GROUP BY n.run_id
)
SELECT
    n.run_id,
    h.run_id IS NOT NULL AS ok,
    coalesce(list_sort(h.evidence), []::BIGINT[]) AS evidence,
    CASE WHEN h.run_id IS NOT NULL THEN 'flagged the conflict (seq ' || list_sort(h.evidence)[1] || ')'
         ELSE 'did not flag the conflict'
    END AS reason
FROM needed n LEFT JOIN hits h ON h.run_id = n.run_id;
