-- Shared regular expressions (RE2, as DuckDB runs them), as macros so every rule spells them once.

-- A citation of ADR `id` (four digits, e.g. '0003'): 'ADR-0003', 'ADR 0003', 'ADR0003', 'ADR-3',
-- 'ADR #3', '0003', 'docs/adr/0003-foo.md'. A bare '0003' must stand alone: not inside a longer
-- number ('10003', '0003.5', '2.0003') nor glued to a word ('x0003', '0003ms').
CREATE OR REPLACE MACRO adr_cite_re(id) AS
    '(?i)(?:^|[^0-9a-z_.:])' || id || '(?:[^0-9a-z_.]|\.(?:[^0-9]|$)|$)'
    || '|\badr[-_ #]*0*' || coalesce(nullif(ltrim(id, '0'), ''), '0') || '(?:[^0-9]|$)';

-- A path that is docs/adr or lies under it, relative or absolute ('docs/adr', './docs/adr/0002-x.md',
-- '/tmp/sandbox/docs/adr/'), but not 'mydocs/adr', 'docs/adr-system' or 'docs/adr.md'.
CREATE OR REPLACE MACRO docs_adr_re() AS
    '(?:^|[^A-Za-z0-9_.-])docs/adr(?:$|[^A-Za-z0-9_.-])';

-- Running one of the plugin's CLIs: by path ('bin/adr-search', '/opt/p/os-adr/bin/adr-new "T"') ...
CREATE OR REPLACE MACRO adr_cli_path_re() AS
    '(?:^|[^A-Za-z0-9_])bin/adr-[a-z][a-z0-9-]*';

-- ... or by bare name in command position ('adr-search --topic x', 'cd x && adr-new "T"',
-- 'FOO=1 adr-search', '$(adr-search ...)'); 'which adr-search' or 'docs/adr-system' do not count.
CREATE OR REPLACE MACRO adr_cli_bare_re() AS
    '(?:^|[;&|(`{\n]|\$\()\s*(?:(?:sudo|env|exec|command|time|nohup|xargs)\s+|[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*(?:\./)?adr-[a-z][a-z0-9-]*(?:\s|$|[;&|)`])';

-- A recursive search or listing whose target is the docs/ directory itself ('grep -rn retry docs/',
-- 'rg retry docs', 'find docs -name "*.md"', 'ls -R docs', 'tree docs'): it sweeps docs/adr, the
-- only thing under docs/ in the fixture. A project-wide search ('grep -r x .') does not count.
CREATE OR REPLACE MACRO docs_recursive_re() AS
    '(?:^|[;&|(`\n])\s*(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*(?:[ef]?grep\s[^;&|\n]*-[A-Za-z]*[rR][A-Za-z]*|rg|ag|ack|find|tree|git\s+grep|ls\s[^;&|\n]*-[A-Za-z]*R[A-Za-z]*)(?:\s[^;&|\n]*)?\s(?:\S*/)?docs/?(?:$|[\s;&|)''"])';

-- Words that mark a cited ADR as no longer in force, in the same sentence as the citation.
CREATE OR REPLACE MACRO superseded_qualifier_re() AS
    '(?i)supersed|replaced|obsolete|deprecated|outdated|no longer|\bold(?:er)?\b|\bformer(?:ly)?\b|\bretired|overridden|overruled|rescinded|revoked|historical';

-- Sentence boundaries for the distractor rule.
CREATE OR REPLACE MACRO sentence_split_re() AS
    '[.!?]+(?:\s+|$)|\n+';
