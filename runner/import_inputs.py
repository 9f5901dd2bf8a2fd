"""What `evalb-record import` is asked to import: files, globs, directories, or a manifest TSV.

Everything is checked before anything is written (a wrong column, an unknown scenario, a missing
file is one `UsageError` naming it), so a mistake never leaves half an import behind. A manifest is
a tab-separated file with a header line; its columns are `transcript`, `scenario`, `model` and,
optionally, `sandbox`; relative paths are taken from the manifest's folder.
"""

from __future__ import annotations

import csv
import glob
from dataclasses import dataclass
from pathlib import Path

from evalb.errors import UsageError
from evalb.scenarios import resolve_variant

MANIFEST_COLUMNS = ("transcript", "scenario", "model", "sandbox")
REQUIRED_COLUMNS = ("transcript", "scenario", "model")


@dataclass(frozen=True)
class ImportItem:
    """One transcript to import: the scenario variant and model it was recorded with, and the
    sandbox it ran in if known."""

    transcript: Path
    scenario: str
    model: str
    sandbox: Path | None = None


def expand_sources(sources: list[Path]) -> list[Path]:
    """Transcript files named by `sources`: a file as is, a directory's `*.jsonl` (sorted, not
    recursive), a glob pattern's matches (sorted); duplicates kept once, in order."""
    out: dict[Path, None] = {}
    for src in sources:
        if src.is_dir():
            found = sorted(p for p in src.glob("*.jsonl") if p.is_file())
            if not found:
                raise UsageError(f"{src} holds no *.jsonl transcript", hint="pass the folder of transcripts")
        elif src.exists() or not glob.has_magic(str(src)):
            found = [src]
        else:
            found = sorted(Path(p) for p in glob.glob(str(src)) if Path(p).is_file())
            if not found:
                raise UsageError(f"no transcript matches {src}", hint="check the pattern")
        out.update(dict.fromkeys(found))
    return list(out)


def read_manifest(path: Path) -> list[ImportItem]:
    """The items of a manifest TSV (see the module docstring); a malformed one is a `UsageError`
    naming the line."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise UsageError(f"cannot read manifest {path}: {e.strerror}") from e
    except UnicodeDecodeError as e:
        raise UsageError(f"manifest {path} is not UTF-8 text") from e
    rows = list(csv.reader(text.splitlines(), delimiter="\t", quoting=csv.QUOTE_NONE))
    rows = [r for r in rows if any(c.strip() for c in r)]
    if not rows:
        raise UsageError(f"manifest {path} is empty", hint="write a header line: transcript, scenario, model")
    header = [c.strip() for c in rows[0]]
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    unknown = [c for c in header if c not in MANIFEST_COLUMNS]
    if missing or unknown or len(set(header)) != len(header):
        what = f"no {', '.join(repr(c) for c in missing)} column" if missing else ""
        what = what or (f"unknown column {unknown[0]!r}" if unknown else "a column named twice")
        raise UsageError(
            f"manifest {path} has {what}",
            hint="its tab-separated header names transcript, scenario, model and optionally sandbox",
        )
    base = path.parent
    items = []
    for n, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise UsageError(
                f"manifest {path} line {n} has {len(row)} fields, the header {len(header)}",
                hint="separate fields with one tab",
            )
        f = {k: v.strip() for k, v in zip(header, row, strict=True)}
        empty = [k for k in REQUIRED_COLUMNS if not f[k]]
        if empty:
            raise UsageError(f"manifest {path} line {n} has an empty {empty[0]!r}")
        sandbox = f.get("sandbox") or None
        items.append(
            ImportItem(
                transcript=base / f["transcript"],
                scenario=f["scenario"],
                model=f["model"],
                sandbox=base / sandbox if sandbox else None,
            )
        )
    if not items:
        raise UsageError(f"manifest {path} lists no transcript", hint="add one line per transcript")
    return items


def check_items(items: list[ImportItem]) -> None:
    """Refuse, before anything is written, an unknown scenario, a transcript that is not a file
    and a sandbox that is not a directory."""
    for scenario in sorted({i.scenario for i in items}):
        resolve_variant(scenario)
    for item in items:
        if not item.transcript.is_file():
            why = "it is a directory" if item.transcript.is_dir() else "no such file"
            raise UsageError(f"cannot read transcript {item.transcript}: {why}")
        if item.sandbox is not None and not item.sandbox.is_dir():
            raise UsageError(
                f"--sandbox {item.sandbox} is not a directory",
                hint=f"pass the sandbox the client ran in (built with `evalb sandbox {item.scenario} DIR`)",
            )
