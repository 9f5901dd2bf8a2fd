"""Archive migrations on a real v1 archive (tests/core/golden/archive-v1: W1 and R2 ×
scripted:oracle recorded and scored by evalb at schema v1, with git-status artifacts): v1 -> v2 ->
v3, and v2 -> v3 on the same archive as v2 wrote it (no `arm` column)."""

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


V1_TO_V3 = ["v1-to-v2-capture-without-git", "v2-to-v3-arms"]


def test_migrate_cli_brings_v1_to_v3_dropping_nothing(v1: Path) -> None:
    before = {
        t: pl.read_parquet(str(v1 / t / "*.parquet")) for t in ("runs", "events", "artifacts", "scores")
    }
    out = subprocess.run([EXE, "migrate", "--archive", v1], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    marker = json.loads((v1 / "archive.json").read_text())
    assert marker["schema_version"] == SCHEMA_VERSION == 3
    assert [m["name"] for m in marker["migrations"]] == V1_TO_V3
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
    runs = pl.read_parquet(str(v1 / "runs" / "*.parquet"))
    assert runs["capture_json"].null_count() == 2
    assert runs["arm"].to_list() == ["default", "default"]


def test_migration_is_idempotent_and_finishes_a_half_done_run(v1: Path) -> None:
    """Run the v1->v2 step on one table (a migration stopped half way), then all: the done files are
    not rewritten; then again: nothing is rewritten at all."""
    assert migrations.add_missing_columns(v1, "artifacts") == 2
    done = _bytes(v1)
    assert migrations.migrate(v1, 1) == V1_TO_V3
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


def _as_v2(root: Path) -> None:
    """Turn a migrated archive back into what schema v2 wrote: runs without `arm`, marker v2."""
    for path in (root / "runs").glob("*.parquet"):
        pl.read_parquet(path).drop("arm").write_parquet(path)
    marker = json.loads((root / "archive.json").read_text())
    marker["schema_version"] = 2
    marker["migrations"] = marker["migrations"][:1]
    (root / "archive.json").write_text(json.dumps(marker))


def test_v2_archive_migrates_to_v3_with_default_arm_and_resumes(v1: Path) -> None:
    """A v2 archive is refused until migrated; `migrate` gives every run arm 'default', in schema
    order (after plugin_dir), changing no other value; its slots stay filled for a resumed grid."""
    migrations.migrate(v1, 1)
    _as_v2(v1)
    before = pl.read_parquet(str(v1 / "runs" / "*.parquet"))
    assert "arm" not in before.columns
    with pytest.raises(ArchiveError) as err:
        connect(v1)
    assert "schema v2" in err.value.one_line()
    out = subprocess.run([EXE, "migrate", "--archive", v1], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "v2 -> v3" in out.stderr, out.stderr
    marker = json.loads((v1 / "archive.json").read_text())
    assert [m["name"] for m in marker["migrations"]] == V1_TO_V3
    after = pl.read_parquet(str(v1 / "runs" / "*.parquet"))
    assert after.columns == list(polars_schema("runs"))
    assert after.columns.index("arm") == after.columns.index("plugin_dir") + 1
    assert after["arm"].to_list() == ["default"] * before.height
    assert after.drop("arm").equals(before.select(after.drop("arm").columns))
    assert Archive(v1).committed_slots().keys() == set(before["slot"])
    assert connect(v1).execute("SELECT count(*) FROM runs WHERE arm = 'default'").fetchone() == (2,)
    done = _bytes(v1)
    assert migrations.migrate(v1, 2) == ["v2-to-v3-arms"]  # run again: nothing left to add
    assert _bytes(v1) == done
