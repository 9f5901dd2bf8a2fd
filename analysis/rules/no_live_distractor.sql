-- R2: a superseded distractor ADR (e.g. 0001) must not be cited as if it were live. "As if live"
-- means: a sentence of the agent's text cites the distractor and the same sentence carries no
-- qualifier marking it as no longer in force (superseded, replaced, obsolete, deprecated, old, ...;
-- see superseded_qualifier_re). "0001 was superseded by 0003" is fine; "Per ADR-0001 we keep
-- SQLite" fails. ok is NULL for scenarios without distractors.
CREATE OR REPLACE TEMP VIEW no_live_distractor AS
WITH needed AS (
    SELECT r.run_id, unnest(m.distractors) AS distractor
    FROM runs r JOIN scenario_meta m ON m.variant = r.variant
    WHERE len(m.distractors) > 0
),
sentences AS (
    SELECT t.run_id, t.seq, unnest(regexp_split_to_array(t.text, sentence_split_re())) AS sentence
    FROM assistant_text t
    WHERE t.run_id IN (SELECT run_id FROM needed)
),
live AS (
    SELECT n.run_id, n.distractor, s.seq
    FROM needed n
    JOIN sentences s ON s.run_id = n.run_id
    WHERE regexp_matches(s.sentence, adr_cite_re(n.distractor))
      AND NOT regexp_matches(s.sentence, superseded_qualifier_re())
),
per_run AS (
    SELECT run_id, list_sort(list_distinct(list(seq))) AS evidence,
           string_agg(DISTINCT distractor, ',') AS ids
    FROM live GROUP BY run_id
)
SELECT
    n.run_id,
    p.run_id IS NULL AS ok,
    coalesce(p.evidence, []::BIGINT[]) AS evidence,
    CASE WHEN p.run_id IS NOT NULL
        THEN 'cited superseded ' || p.ids || ' as live (seq ' || p.evidence[1] || ')'
    END AS reason
FROM (SELECT DISTINCT run_id FROM needed) n LEFT JOIN per_run p ON p.run_id = n.run_id;
