"""Archive schema v1 -> v2 on a real v1 archive (tests/core/golden/archive-v1: W1 and R2 ×
scripted:oracle recorded and scored by evalb at schema v1, with git-status artifacts)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import duckdb
import polars as pl
import pytest

from evalb import migrations
from evalb.archive import Archive, connect
from evalb.errors import ArchiveError
from evalb.schema import SCHEMA_VERSION, TABLES, polars_schema

V1 = Path(__file__).parent / "golden" / "archive-v1"
EXE = Path(".venv/bin/evalb-record").resolve()


@pytest.fixture
def v1(tmp_path: Path) -> Path:
    root = tmp_path / "a"
    shutil.copytree(V1, root)
    assert json.loads((root / "archive.json").read_text())["schema_version"] == 1
    return root


def _bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.parquet"))}


def test_v1_archive_is_refused_until_migrated(v1: Path) -> None:
    with pytest.raises(ArchiveError) as err:
        connect(v1)
    assert "evalb-record migrate" in err.value.one_line()


def test_migrate_cli_brings_v1_to_v2_dropping_nothing(v1: Path) -> None:
    before = {
        t: pl.read_parquet(str(v1 / t / "*.parquet")) for t in ("runs", "events", "artifacts", "scores")
    }
    out = subprocess.run([EXE, "migrate", "--archive", v1], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    marker = json.loads((v1 / "archive.json").read_text())
    assert marker["schema_version"] == SCHEMA_VERSION == 2
    assert [m["name"] for m in marker["migrations"]] == ["v1-to-v2-capture-without-git"]
    con = connect(v1)  # readable now
    for table, old in before.items():
        new = pl.read_parquet(str(v1 / table / "*.parquet"))
        assert set(polars_schema(table)) <= set(new.columns), table
        assert new.height == old.height
        kept = [c for c in old.columns if c != "kind"]
        assert new.select(kept).equals(old.select(kept)), f"{table}: a v1 value changed"
        assert con.execute(f"SELECT count(*) FROM {table}").fetchone() == (old.height,)
    arts = pl.read_parquet(str(v1 / "artifacts" / "*.parquet"))
    pairs = set(arts.select("git_status", "kind", "change").unique().iter_rows())
    assert ("??", "file", "added") in pairs and (" M", "file", "modified") in pairs
    assert (None, "git_status", None) in pairs and (None, "file", "unchanged") in pairs
    assert arts["flags"].to_list() == [[]] * arts.height
    assert pl.read_parquet(str(v1 / "runs" / "*.parquet"))["capture_json"].null_count() == 2


def test_migration_is_idempotent_and_finishes_a_half_done_run(v1: Path) -> None:
    """Run the v1->v2 step on one table (a migration stopped half way), then all: the done files are
    not rewritten; then again: nothing is rewritten at all."""
    assert migrations.add_missing_columns(v1, "artifacts") == 2
    done = _bytes(v1)
    assert migrations.migrate(v1, 1) == ["v1-to-v2-capture-without-git"]
    after = _bytes(v1)
    assert {k: v for k, v in after.items() if k.startswith("artifacts/")} == {
        k: v for k, v in done.items() if k.startswith("artifacts/")
    }
    for table in TABLES:
        assert migrations.add_missing_columns(v1, table) == 0
    assert _bytes(v1) == after


def test_migrated_archive_scores_and_mixes_with_v2_runs(v1: Path) -> None:
    """After migration the W1 oracle's v1 ADR (git status '??') still passes axis (b), a new v2 run
    is committed beside the v1 ones, and plain DuckDB reads the mix."""
    from analysis.checker import rule_connection
    from tests.checker.helpers import Runs

    Archive(v1).ensure()  # a recorder opening a v1 archive migrates it
    con = rule_connection(v1)
    rows = dict(con.execute("SELECT r.variant, n.ok FROM new_adr n JOIN runs r USING (run_id)").fetchall())
    assert rows == {"W1": True, "R2": None}
    from analysis import fabricate as fab

    runs = Runs(v1)
    runs.add("v2", ["{}"], "W1", files=[fab.SandboxFile("docs/adr/0009-dedup.md", "added", "dedup")])
    n = (
        duckdb.connect()
        .execute(
            f"SELECT count(*), count(change), count(git_status) FROM read_parquet('{v1}/artifacts/*.parquet', union_by_name=true)"
        )
        .fetchone()
    )
    # 17 v1 rows (2 status listings: no change; 2 with a git code) + 1 v2 row (no git code)
    assert n == (18, 16, 2)


def test_v1_codes_map_to_changes(v1: Path) -> None:
    """Every v1 shape maps: a deleted file (kind 'deleted', ' D'), a staged add ('A '), a rename
    ('R '), a modification ('MM'); unknown extra columns are kept."""
    path = sorted((v1 / "artifacts").glob("*.parquet"))[0]
    df = pl.read_parquet(path)
    extra = pl.DataFrame(
        {
            "run_id": [df["run_id"][0]] * 4,
            "path": ["gone.rb", "new.md", "moved.rb", "both.rb"],
            "kind": ["deleted", "file", "file", "file"],
            "git_status": [" D", "A ", "R ", "MM"],
            "content": [None, "n", "m", "b"],
            "sha256": [None, "x", "y", "z"],
            "size": [None, 1, 1, 1],
        },
        schema=df.schema,
    )
    df = pl.concat([df, extra]).with_columns(legacy_note=pl.lit("kept"))
    df.write_parquet(path)
    migrations.migrate(v1, 1)
    new = pl.read_parquet(path)
    got = {r["path"]: (r["kind"], r["change"]) for r in new.iter_rows(named=True)}
    assert got["gone.rb"] == ("file", "deleted") and got["new.md"] == ("file", "added")
    assert got["moved.rb"] == ("file", "modified") and got["both.rb"] == ("file", "modified")
    assert new.columns[-1] == "legacy_note" and set(new["legacy_note"]) == {"kept"}
