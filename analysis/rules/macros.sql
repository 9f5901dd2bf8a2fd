-- Shared regular expressions (RE2, as DuckDB runs them), as macros so every rule spells them once.

-- A path that is docs/adr or lies under it, relative or absolute ('docs/adr', './docs/adr/0002-x.md',
-- '/tmp/sandbox/docs/adr/'), but not 'mydocs/adr', 'docs/adr-system' or 'docs/adr.md'.
CREATE OR REPLACE MACRO docs_adr_re() AS
    '(?:^|[^A-Za-z0-9_.-])docs/adr(?:$|[^A-Za-z0-9_.-])';
