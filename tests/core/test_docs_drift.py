"""Strings the docs quote are the ones the code writes: confinement values, slot formats, cell classes."""

from __future__ import annotations

import re
from pathlib import Path

from analysis.stats import CELL_CLASSES, cell_class
from evalb.archive import Archive
from runner.confine import BWRAP, BWRAP_NO_NETWORK, NO_CONFINEMENT
from runner.importer import import_transcript
from runner.record import slot_key

ROOT = Path(__file__).resolve().parents[2]
ARCHIVE_MD = (ROOT / "docs" / "archive.md").read_text().replace("\\|", "|")
STATISTICS_MD = (ROOT / "docs" / "statistics.md").read_text()
GOLDEN = ROOT / "tests" / "runner" / "golden" / "no-plugin.jsonl"


def _confinement_doc() -> str:
    row = next(ln for ln in ARCHIVE_MD.splitlines() if ln.startswith("| `confinement` |"))
    return row


def test_every_confinement_value_is_documented(tmp_path: Path) -> None:
    """What a recorded rep (confined, confined without network, opted out) and an import write."""
    run = import_transcript(GOLDEN, Archive(tmp_path / "a"), scenario="R1", model="haiku")
    assert run is not None
    row = _confinement_doc()
    for value in (BWRAP, BWRAP_NO_NETWORK, NO_CONFINEMENT, run.confinement):
        assert f"'{value}'" in row, f"docs/archive.md does not list confinement {value!r}: {row}"
    documented = set(re.findall(r"'([^']+)'", row))
    assert documented == {BWRAP, BWRAP_NO_NETWORK, NO_CONFINEMENT, run.confinement}


def _shape(slot: str) -> tuple[str, int]:
    """A slot's first field if it is a fixed word (import), and its number of fields."""
    fields = slot.split("|")
    return (fields[0] if fields[0] == "import" else "*", len(fields))


def test_slot_formats_are_documented(tmp_path: Path) -> None:
    """The slot of a recorded rep and of an import have the shapes the docs give (field count, prefix)."""
    recorded = slot_key("R1", "haiku", "f" * 64, 0)
    run = import_transcript(GOLDEN, Archive(tmp_path / "a"), scenario="R1", model="haiku")
    assert run is not None
    documented = re.findall(r"`((?:[\w\[\]:]+\|){3}[\w\[\]:]+)`", ARCHIVE_MD)
    documented += re.findall(r"'((?:[\w\[\]:]+\|){3}[\w\[\]:]+)'", ARCHIVE_MD)
    shapes = {_shape(d) for d in documented}
    assert shapes == {_shape(recorded), _shape(run.slot)}, documented
    assert len(recorded.split("|")[2]) == 16 and "plugin_hash[:16]" in ARCHIVE_MD
    assert len(run.slot.split("|")[3]) == 16 and "sha256[:16]" in ARCHIVE_MD


def test_every_cell_class_is_documented() -> None:
    given = {cell_class(k, n) for n in range(4) for k in range(n + 1)}
    assert given == set(CELL_CLASSES)
    para = next(p for p in STATISTICS_MD.split("\n\n") if p.startswith("`klass`"))
    assert set(re.findall(r"`([a-z]+(?:-[a-z]+)?)`", para)) - {"klass"} == set(CELL_CLASSES), para
