"""Recording with the real Claude Code client against the scripted model: the grid, resume, archive."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pandas as pd
import polars as pl
import pytest

from evalb.scenarios import all_variant_ids
from evalb.schema import columns
from tests.conftest import record_grid

pytestmark = pytest.mark.client
N_VARIANTS = len(all_variant_ids())  # the demo archive has every variant


def _runs(root: Path) -> pl.DataFrame:
    return pl.read_parquet(str(root / "runs" / "*.parquet"))


class TestDemoGrid:
    def test_every_rep_is_recorded_completed_with_the_hook(self, demo_archive: Path) -> None:
        """Every variant × oracle × 2 + oblivious × 1: each run completed, hook seen, real client."""
        runs = _runs(demo_archive)
        assert runs.height == 3 * N_VARIANTS
        assert runs.group_by("model_alias").len().sort("model_alias").rows() == [
            ("scripted:oblivious", N_VARIANTS),
            ("scripted:oracle", 2 * N_VARIANTS),
        ]
        assert set(runs["variant"]) == set(all_variant_ids())
        assert runs["outcome"].unique().to_list() == ["completed"]
        assert runs["hook_seen"].all() and runs["reached_model"].all()
        assert all(note.startswith("[os-adr]") for note in runs["hook_note"])
        assert (
            runs["client_version"].unique().to_list()
            == [Path("/work/main/.claude-code-version").read_text().strip()]
            or runs["client_version"].n_unique() == 1
        )
        assert runs["confinement"].unique().to_list() == ["bwrap"]
        assert runs["plugin_name"].unique().to_list() == ["os-adr"]
        assert runs["plugin_hash"].n_unique() == 1 and runs["fixture_hash"].null_count() == 0
        manifest = json.loads(runs["manifest_json"][0])
        assert {"fixture", "plugin"} <= set(manifest)

    def test_each_rep_has_its_capture(self, demo_archive: Path) -> None:
        """Every run says how its sandbox was captured (no git; nothing capped; no errors), and the
        oblivious agent, which writes nothing, leaves no artifacts."""
        runs = pl.read_parquet(str(demo_archive / "runs" / "*.parquet"))
        caps = [json.loads(c) for c in runs["capture_json"]]
        assert len(caps) == 3 * N_VARIANTS and all(c["method"] == "walk" and c["git"] == "dir" for c in caps)
        assert all(c["caps_hit"] == [] and c["errors"] == 0 for c in caps)
        arts = pl.read_parquet(str(demo_archive / "artifacts" / "*.parquet"))
        oblivious = runs.filter(pl.col("model_alias") == "scripted:oblivious")["run_id"]
        assert arts.filter(pl.col("run_id").is_in(oblivious.implode())).height == 0
        assert arts["git_status"].null_count() == arts.height

    def test_oracle_records_a_new_adr_in_w_scenarios(self, demo_archive: Path) -> None:
        """The W oracle's new ADR (written by the plugin CLI in the sandbox) is in the artifacts as added."""
        con = duckdb.connect()
        new = con.execute(
            f"""
            SELECT r.variant, count(*) AS n
            FROM read_parquet('{demo_archive}/artifacts/*.parquet') a
            JOIN read_parquet('{demo_archive}/runs/*.parquet') r USING (run_id)
            WHERE a.kind = 'file' AND a.change = 'added' AND a.path LIKE 'docs/adr/00%'
              AND r.model_alias = 'scripted:oracle'
            GROUP BY ALL ORDER BY 1
            """
        ).fetchall()
        assert new == [("W1", 2), ("W2", 2), ("W3", 2)]

    def test_r4_nograph_misses_for_a_genuine_reason(self, demo_archive: Path) -> None:
        """With the graph the plugin's search by file finds ADR-0003; without it, it finds nothing."""
        con = duckdb.connect()
        rows = con.execute(
            f"""
            SELECT r.variant, bool_or(e.text LIKE 'ADR-0003%via graph%') AS found
            FROM read_parquet('{demo_archive}/events/*.parquet') e
            JOIN read_parquet('{demo_archive}/runs/*.parquet') r USING (run_id)
            WHERE r.model_alias = 'scripted:oracle' AND r.variant IN ('R4', 'R4-nograph')
              AND e.block_type = 'tool_result'
            GROUP BY ALL ORDER BY 1
            """
        ).fetchall()
        assert rows == [("R4", True), ("R4-nograph", False)]

    def test_rerun_records_nothing_new(self, demo_archive: Path, copy_archive) -> None:  # type: ignore[no-untyped-def]
        """Resuming the same grid skips every filled slot."""
        root = copy_archive(demo_archive)
        report = record_grid(root, ["all"], ["scripted:oracle"], 2)
        assert (report.planned, report.skipped, len(report.recorded)) == (2 * N_VARIANTS, 2 * N_VARIANTS, 0)
        assert _runs(root).height == 3 * N_VARIANTS

    def test_growing_reps_records_only_the_new_ones(self, demo_archive: Path, copy_archive) -> None:  # type: ignore[no-untyped-def]
        """Asking for 2 reps where 1 exists records exactly one more per cell."""
        root = copy_archive(demo_archive)
        report = record_grid(root, ["R1"], ["scripted:oblivious"], 2)
        assert [(r.variant, r.rep) for r in report.recorded] == [("R1", 1)]


class TestReadingWithoutEvalb:
    @pytest.mark.parametrize("table", ["runs", "events", "artifacts"])
    def test_documented_columns_in_three_readers(self, demo_archive: Path, table: str) -> None:
        """DuckDB, Polars and pandas read each table with exactly the documented columns."""
        glob = str(demo_archive / table / "*.parquet")
        expected = columns(table)
        assert [
            d[0] for d in duckdb.sql(f"SELECT * FROM read_parquet('{glob}') LIMIT 0").description
        ] == expected
        assert pl.scan_parquet(glob).collect_schema().names() == expected
        assert list(pd.read_parquet(demo_archive / table).columns) == expected

    def test_events_keep_raw_lines(self, demo_archive: Path) -> None:
        """Every event row's raw line parses as the JSON object the client wrote."""
        events = pl.read_parquet(str(demo_archive / "events" / "*.parquet"))
        assert events["malformed"].sum() == 0
        sample = events.filter(pl.col("tool_name") == "Bash").row(0, named=True)
        raw = json.loads(sample["raw"])
        assert raw["message"]["content"][sample["block_index"]]["input"] == json.loads(sample["tool_input"])


def test_a_plugin_under_tmp_stays_visible_to_the_confined_client(tmp_path: Path) -> None:
    """Each rep gets a private /tmp; a plugin (or a checkout, as in CI) living under /tmp is bound back."""
    import shutil

    from evalb import paths

    plugin = tmp_path / "my-plugin"
    shutil.copytree(paths.REFERENCE_PLUGIN, plugin)
    report = record_grid(tmp_path / "a", ["R1"], ["scripted:oracle"], 1, plugin_dir=plugin)
    (run,) = report.recorded
    assert (run.outcome, run.hook_seen, run.plugin_dir) == ("completed", True, str(plugin.resolve()))
    assert str(plugin) in (run.hook_note or "")
