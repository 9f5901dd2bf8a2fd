-- Axis (a), unprompted consultation: some tool_use block (sub-agents' included) invokes an os-adr:*
-- skill, runs a bin/adr-* CLI (by path or by bare name), or reads, writes, lists or searches
-- docs/adr. Only tool inputs count (command, file_path, path, pattern, skill), never prose: not the
-- agent's text, not the hook note, not tool results, not a Task prompt or a Bash `description`.
-- A project-wide search ('grep -r x .') does not count: it shows no sign the agent noticed the ADRs.
CREATE OR REPLACE TEMP VIEW consulted AS
WITH hits AS (
    SELECT run_id, seq, CASE
        WHEN tool_name IN ('Skill', 'SlashCommand')
             AND regexp_matches(coalesce(skill, command, ''), '^/?os-adr:')
            THEN 'skill ' || ltrim(coalesce(skill, command), '/')
        WHEN regexp_matches(command, adr_cli_path_re()) OR regexp_matches(command, adr_cli_bare_re())
            THEN 'ran ' || regexp_extract(command, 'adr-[a-z][a-z0-9-]*')
        WHEN regexp_matches(command, docs_adr_re()) THEN 'Bash on docs/adr'
        WHEN regexp_matches(command, docs_recursive_re()) THEN 'recursive search of docs/'
        WHEN regexp_matches(file_path, docs_adr_re()) THEN tool_name || ' docs/adr'
        WHEN regexp_matches(search_path, docs_adr_re())
             OR (tool_name = 'Glob' AND regexp_matches(pattern, docs_adr_re()))
             OR (tool_name IN ('Grep', 'Glob') AND regexp_matches(search_path, '(?:^|/)docs/?$'))
             OR (tool_name = 'Glob' AND regexp_matches(pattern, '^(?:\S*/)?docs/\*\*'))
            THEN tool_name || ' on docs/adr'
    END AS how
    FROM tool_calls
),
per_run AS (
    SELECT run_id, list(seq ORDER BY seq) AS evidence, arg_min(how, seq) AS first_how
    FROM hits WHERE how IS NOT NULL GROUP BY run_id
)
SELECT
    r.run_id,
    p.run_id IS NOT NULL AS ok,
    coalesce(p.evidence, []::BIGINT[]) AS evidence,
    CASE WHEN p.run_id IS NOT NULL
        THEN 'A: ' || p.first_how || ' (seq ' || p.evidence[1] || ')'
        ELSE 'A: no tool call touched the ADR system'
    END AS reason
FROM runs r LEFT JOIN per_run p ON p.run_id = r.run_id;
