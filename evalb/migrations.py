"""Named, append-only archive migrations: each moves an archive from one schema version to the next.

Never edit a migration that has shipped; add a new one and bump `evalb.schema.SCHEMA_VERSION`.
A migration rewrites table files atomically and records itself in archive.json.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path

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
