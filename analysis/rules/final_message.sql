-- W scenarios with no new ADR on the topic, and O scenarios not already needless (a needless proposal
-- in prose is the same question, `needless.sql`): the judge's only input, the agent's final message:
-- the text of the last `result` event, or, when there is none, the main agent's last text block.
-- Only valid runs are judged (an invalid run is never paid for).
CREATE OR REPLACE TEMP VIEW final_message AS
WITH ranked AS (
    SELECT run_id, seq, text,
           row_number() OVER (PARTITION BY run_id
                              ORDER BY (type = 'result') DESC, seq DESC) AS rk
    FROM assistant_text
    WHERE type = 'result' OR parent_tool_use_id IS NULL
)
SELECT n.run_id, k.seq, coalesce(k.text, '') AS text
FROM (SELECT run_id FROM new_adr WHERE ok = false
      UNION ALL
      SELECT run_id FROM needless WHERE ok = false) n
JOIN valid_run v ON v.run_id = n.run_id AND v.ok
LEFT JOIN ranked k ON k.run_id = n.run_id AND k.rk = 1;
