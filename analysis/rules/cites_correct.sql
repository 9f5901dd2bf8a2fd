-- R scenarios: the agent's text cites the scenario's correct ADR (see adr_cite_re for the forms).
-- NULL for W scenarios. Required for match=id; for match=content (R3) it is evidence only.
CREATE OR REPLACE TEMP VIEW cites_correct AS
WITH hits AS (
    SELECT t.run_id, list(t.seq ORDER BY t.seq) AS evidence
    FROM assistant_text t
    JOIN runs r ON r.run_id = t.run_id
    JOIN scenario_meta m ON m.variant = r.variant
    WHERE m.kind = 'retrieval' AND regexp_matches(t.text, adr_cite_re(m.correct_adr))
    GROUP BY t.run_id
)
SELECT
    r.run_id,
    CASE WHEN m.kind = 'retrieval' THEN h.run_id IS NOT NULL END AS ok,
    coalesce(h.evidence, []::BIGINT[]) AS evidence,
    CASE WHEN m.kind <> 'retrieval' THEN NULL
         WHEN h.run_id IS NOT NULL THEN 'cited ' || m.correct_adr || ' (seq ' || h.evidence[1] || ')'
         ELSE 'did not cite ' || m.correct_adr
    END AS reason
FROM runs r
JOIN scenario_meta m ON m.variant = r.variant
LEFT JOIN hits h ON h.run_id = r.run_id;
