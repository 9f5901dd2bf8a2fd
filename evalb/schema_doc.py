"""Keeps docs/archive.md's column tables equal to the schema: `python -m evalb.schema_doc [--check]`."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from evalb import paths
from evalb.schema import TABLES, polars_schema

DOC = paths.REPO_ROOT / "docs" / "archive.md"
_BLOCK = re.compile(r"(<!-- columns:(\w+) -->\n)(.*?)(<!-- /columns -->)", re.S)


def column_table(table: str) -> str:
    """A Markdown table of a table's columns: name, Parquet/Polars type, description."""
    schema = polars_schema(table)
    rows = ["| column | type | meaning |", "| --- | --- | --- |"]
    for name, field in TABLES[table].model_fields.items():
        meaning = field.description or ""
        if not field.is_required():  # a column added after v1: what a migration gives older rows
            default = field.default_factory() if field.default_factory else field.default  # type: ignore[call-arg]
            meaning += f" Older rows: `{json.dumps(default)}`."
        meaning = meaning.replace("|", "\\|")  # a bare | would end the Markdown cell
        rows.append(f"| `{name}` | {schema[name]} | {meaning} |")
    return "\n".join(rows) + "\n"


def render(text: str) -> str:
    return _BLOCK.sub(lambda m: m.group(1) + column_table(m.group(2)) + m.group(4), text)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    text = DOC.read_text()
    new = render(text)
    if "--check" in argv:
        if new != text:
            print(f"{DOC} is out of date: run python -m evalb.schema_doc", file=sys.stderr)
            return 1
        return 0
    Path(DOC).write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
