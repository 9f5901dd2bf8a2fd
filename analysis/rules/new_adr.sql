-- W scenarios, deterministic part: the sandbox's end state holds a NEW decision record
-- docs/adr/NNNN-*.md -- a regular file (not a symlink) that was not in the sandbox's initial tree
-- (change 'added', committed or not) -- whose path or body matches any of the scenario's topic
-- patterns (case-insensitive). NULL for R scenarios. A v1 row (no `change`) counts as added when
-- its git status was untracked or added.
-- Evidence: the tool calls that name the new file (Write/Edit path or a Bash command), if any.
CREATE OR REPLACE TEMP VIEW new_adr AS
WITH candidates AS (
    SELECT a.run_id, a.path
    FROM artifacts a
    JOIN runs r ON r.run_id = a.run_id
    JOIN scenario_meta m ON m.variant = r.variant AND m.kind = 'write'
    WHERE a.kind = 'file'
      AND regexp_matches(a.path, '^docs/adr/[0-9]{4}-[^/]*\.md$')
      AND coalesce(a.change, CASE WHEN a.git_status LIKE '?%' OR a.git_status LIKE 'A%' THEN 'added' END)
          = 'added'
      AND EXISTS (
          SELECT 1 FROM scenario_patterns p
          WHERE p.variant = r.variant AND p.role = 'topic'
            AND regexp_matches(a.path || chr(10) || coalesce(a.content, ''), p.pattern, 'i'))
),
per_run AS (
    SELECT c.run_id, min(c.path) AS path,
           list_sort(list_distinct(list(tc.seq) FILTER (WHERE tc.seq IS NOT NULL))) AS evidence
    FROM candidates c
    LEFT JOIN tool_calls tc ON tc.run_id = c.run_id
        AND (ends_with(tc.file_path, c.path) OR contains(tc.command, regexp_extract(c.path, '[0-9]{4}-[^/]*$')))
    GROUP BY c.run_id
)
SELECT
    r.run_id,
    CASE WHEN m.kind = 'write' THEN p.run_id IS NOT NULL END AS ok,
    coalesce(p.evidence, []::BIGINT[]) AS evidence,
    CASE WHEN m.kind <> 'write' THEN NULL
         WHEN p.run_id IS NOT NULL THEN 'new ADR ' || p.path || ' matches the topic'
         ELSE 'no new ADR on the topic'
    END AS reason
FROM runs r
JOIN scenario_meta m ON m.variant = r.variant
LEFT JOIN per_run p ON p.run_id = r.run_id;
