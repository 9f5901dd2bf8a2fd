-- O scenarios (overtrigger), deterministic part of "needless": the task had nothing to do with
-- any decision, yet the run consulted the ADR system or wrote to it.
-- Needless consultation = the axis (a) `consulted` rule, reused unchanged (an os-adr skill, a plugin
-- CLI run, a read/list/search/write of a path under docs/adr, a recursive search of docs/; never a
-- mere mention, never `ls` of the project root or a project-wide search).
-- Needless proposal, written = the end state changed anything under docs/adr (a record added,
-- modified or deleted, however it was written: a script the shell parse cannot see into too), or
-- capture could not see that far (an 'unseen' entry at docs/adr, docs or the root: no false PASS).
-- Needless proposal, in prose = the W judge's question on the final message; the checker asks it
-- for the valid O runs this view leaves not needless (final_message) and `verdict` combines it.
-- NULL for W and R runs.
CREATE OR REPLACE TEMP VIEW needless AS
WITH adr_changes AS (
    SELECT run_id, min(path) AS path, arg_min(change, path) AS change
    FROM artifacts
    WHERE (regexp_matches(path, '^docs/adr(?:/|$)') AND change IN ('added', 'modified', 'deleted', 'unseen'))
       OR (change = 'unseen' AND path IN ('', '.', 'docs'))
    GROUP BY run_id
)
SELECT
    r.run_id,
    CASE WHEN m.kind = 'overtrigger' THEN c.ok OR ac.run_id IS NOT NULL END AS ok,
    CASE WHEN m.kind = 'overtrigger' THEN c.evidence ELSE []::BIGINT[] END AS evidence,
    CASE WHEN m.kind <> 'overtrigger' THEN NULL
         WHEN c.ok THEN 'needless consultation: ' || regexp_replace(c.reason, '^A: ', '')
         WHEN ac.change = 'unseen' THEN 'needless proposal not ruled out: capture did not reach ' || ac.path
         WHEN ac.run_id IS NOT NULL THEN 'needless proposal: ' || ac.path || ' ' || ac.change
         ELSE 'no needless consultation or proposal'
    END AS reason
FROM runs r
JOIN scenario_meta m ON m.variant = r.variant
JOIN consulted c ON c.run_id = r.run_id
LEFT JOIN adr_changes ac ON ac.run_id = r.run_id;
