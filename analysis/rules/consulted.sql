-- Axis (a), unprompted consultation: some tool_use block (sub-agents' included) invokes an os-adr:*
-- skill, runs a plugin CLI (adr-NAME in command position), or reads, writes, lists or searches a
-- path under docs/adr. Only tool inputs count (file_path, path, pattern, skill, and what a Bash
-- command does), never prose: not the agent's text, not the hook note, not tool results, not a Task
-- prompt or a Bash `description`. Bash commands are not grepped: `shell_ops` (analysis/rules/shell.py,
-- a tree-sitter-bash parse of each command) says which paths each command reads, lists, searches or
-- writes and which plugin CLIs it runs; a path merely mentioned (echo/printf text, a commit message,
-- a heredoc body, a search pattern) is not in it.
-- A recursive search or listing of docs/ itself counts (it sweeps docs/adr); a project-wide search
-- ('grep -r x .') does not: it shows no sign the agent noticed the ADRs.
CREATE OR REPLACE TEMP VIEW consulted AS
WITH tool_hits AS (
    SELECT run_id, seq, 0 AS idx, CASE
        WHEN tool_name IN ('Skill', 'SlashCommand')
             AND regexp_matches(coalesce(skill, command, ''), '^/?os-adr:')
            THEN 'skill ' || ltrim(coalesce(skill, command), '/')
        WHEN tool_name = 'Bash' THEN NULL
        WHEN regexp_matches(file_path, docs_adr_re()) THEN tool_name || ' docs/adr'
        WHEN regexp_matches(search_path, docs_adr_re())
             OR (tool_name = 'Glob' AND regexp_matches(pattern, docs_adr_re()))
             OR (tool_name IN ('Grep', 'Glob') AND regexp_matches(search_path, '(?:^|/)docs/?$'))
             OR (tool_name = 'Glob' AND regexp_matches(pattern, '^(?:\S*/)?docs/\*\*'))
            THEN tool_name || ' on docs/adr'
    END AS how
    FROM tool_calls
),
bash_hits AS (
    SELECT run_id, seq, idx, CASE
        WHEN op = 'run_cli' THEN 'ran ' || path
        WHEN regexp_matches(path, docs_adr_re()) THEN 'Bash on docs/adr'
        WHEN recursive AND regexp_matches(path, '(?:^|/)docs/?$') THEN 'recursive search of docs/'
    END AS how
    FROM shell_ops
),
hits AS (
    SELECT * FROM tool_hits WHERE how IS NOT NULL
    UNION ALL
    SELECT * FROM bash_hits WHERE how IS NOT NULL
),
per_run AS (
    SELECT run_id, list(DISTINCT seq ORDER BY seq) AS evidence, arg_min(how, seq * 100000 + idx) AS first_how,
           min(seq) AS first_seq
    FROM hits GROUP BY run_id
)
SELECT
    r.run_id,
    p.run_id IS NOT NULL AS ok,
    coalesce(p.evidence, []::BIGINT[]) AS evidence,
    CASE WHEN p.run_id IS NOT NULL
        THEN 'A: ' || p.first_how || ' (seq ' || p.first_seq || ')'
        ELSE 'A: no tool call touched the ADR system'
    END AS reason
FROM runs r LEFT JOIN per_run p ON p.run_id = r.run_id;
