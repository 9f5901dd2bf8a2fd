"""Named, append-only archive migrations: each moves an archive from one schema version to the next.

Never edit a migration that has shipped; add a new one and bump `evalb.schema.SCHEMA_VERSION`.
A migration rewrites table files atomically and records itself in archive.json.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args

import polars as pl
from pydantic_core import PydanticUndefined

from evalb.errors import ArchiveError

#: version it migrates FROM -> (name, function(archive_root)).
MIGRATIONS: dict[int, tuple[str, Callable[[Path], None]]] = {}


def migrate(root: Path, from_version: int) -> list[str]:
    """Apply every migration from `from_version` up to the current schema; return their names."""
    from evalb.schema import SCHEMA_VERSION

    applied = []
    version = from_version
    while version < SCHEMA_VERSION:
        if version not in MIGRATIONS:
            raise ArchiveError(f"no migration from archive schema v{version}", hint="re-record this archive")
        name, fn = MIGRATIONS[version]
        fn(root)
        version += 1
        marker = root / "archive.json"
        data = json.loads(marker.read_text())
        data["schema_version"] = version
        data.setdefault("migrations", []).append({"name": name, "at": dt.datetime.now(dt.UTC).isoformat()})
        tmp = marker.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        tmp.replace(marker)
        applied.append(name)
    return applied


# --- v1 -> v2: capture without git (artifacts gain change/mode/link_target/flags; runs gain
# capture_json) and any other column the v2 schema declares. ---------------------------------------
def _default(table: str, column: str) -> Any:
    """The value older rows get for a column their file lacks: the field's documented default."""
    from evalb.schema import TABLES

    info = TABLES[table].model_fields[column]
    if info.default_factory is not None:
        return info.default_factory()  # type: ignore[call-arg]
    if info.default is not PydanticUndefined:
        return info.default
    if info.is_required() and type(None) not in get_args(info.annotation):
        raise ArchiveError(f"the {table}.{column} column has no default to migrate older rows with")
    return None


def add_missing_columns(root: Path, table: str) -> int:
    """Give every file of `table` each column the current schema declares that it lacks (with its
    default), in schema order; columns the schema does not know are kept, at the end. A file that
    already has them all is left as is, so running this again (or after a crash) is safe.
    Returns the number of files rewritten."""
    from evalb.archive import write_parquet_atomic
    from evalb.schema import polars_schema

    schema = polars_schema(table)
    rewritten = 0
    for path in sorted((root / table).glob("*.parquet")):
        have = pl.read_parquet_schema(path)
        missing = [c for c in schema if c not in have]
        if not missing:
            continue
        df = pl.read_parquet(path)
        if table == "artifacts" and "change" in missing:
            kind, code = pl.col("kind"), pl.col("git_status")
            df = df.with_columns(
                change=pl.when(kind == "git_status")
                .then(pl.lit(None, pl.String))
                .when(code.is_null())
                .then(pl.when(kind == "deleted").then(pl.lit("deleted")).otherwise(pl.lit("unchanged")))
                .when(code.str.contains("?", literal=True) | code.str.starts_with("A"))
                .then(pl.lit("added"))
                .when(code.str.contains("D", literal=True) | (kind == "deleted"))
                .then(pl.lit("deleted"))
                .otherwise(pl.lit("modified")),
                kind=pl.when(kind == "deleted").then(pl.lit("file")).otherwise(kind),
            )
            missing.remove("change")
        df = df.with_columns(pl.Series(c, [_default(table, c)] * df.height, dtype=schema[c]) for c in missing)
        extra = [c for c in df.columns if c not in schema]
        write_parquet_atomic(df.select(*schema, *extra), path)
        rewritten += 1
    return rewritten


def _v1_to_v2(root: Path) -> None:
    from evalb.schema import TABLES

    for table in TABLES:
        add_missing_columns(root, table)


MIGRATIONS[1] = ("v1-to-v2-capture-without-git", _v1_to_v2)


# --- v2 -> v3: arms (runs gain `arm`; every v2 run belonged to the one plugin its grid named). -----
def _v2_to_v3(root: Path) -> None:
    from evalb.schema import TABLES

    for table in TABLES:
        add_missing_columns(root, table)


MIGRATIONS[2] = ("v2-to-v3-arms", _v2_to_v3)
