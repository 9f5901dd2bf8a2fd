"""The report at scale: 10,000 runs stay a small page whose transcripts load on demand, in Chromium;
a 200,000-line transcript is paged, not pasted into the page.

The 10,000-run archive is simulated (analysis.simulate: runs, five events each, scores) and
written with one file per table, as a compacted archive holds it.
"""

from __future__ import annotations

import datetime as dt
import re
import subprocess
from pathlib import Path

import polars as pl
import pytest

from analysis import report as rep
from analysis.simulate import _events, simulate_scores
from evalb.archive import Archive
from evalb.schema import ScoreRecord, run_record, to_frame
from tests.stats.test_report import CHROMIUM, FLAGS


def write_compacted(root: Path, scores: pl.DataFrame, extra_events: dict[str, int] | None = None) -> Archive:
    """`scores` committed as an archive with one file per table; a run in `extra_events` gets that
    many more assistant text events after its own five."""
    archive = Archive.create_or_open(root)
    runs, events, score_rows = [], [], []
    for row in scores.iter_rows(named=True):
        runs.append(
            run_record(
                run_id=row["run_id"],
                slot=f"{row['variant']}|{row['model_alias']}|{row['plugin_hash']}|{row['rep']}",
                source="selftest", scenario=row["scenario"], variant=row["variant"],
                model_alias=row["model_alias"], model_id=f"sim-{row['model_alias']}", rep=row["rep"],
                attempt=1, started_at=row["started_at"],
                ended_at=row["started_at"] + dt.timedelta(milliseconds=row["duration_ms"]),
                duration_ms=row["duration_ms"], exit_code=0, outcome=row["outcome"],
                outcome_detail="simulated", reached_model=True, hook_seen=bool(row["valid"]),
                hook_note=None, client_version=None, client_path="(simulated)", session_id=None,
                result_subtype="success", num_turns=2, cost_usd=row["cost_usd"],
                input_tokens=row["input_tokens"], output_tokens=row["output_tokens"],
                cache_read_tokens=0, cache_creation_tokens=0, api_retries=0,
                plugin_name=row["plugin_name"], plugin_version=row["plugin_version"],
                plugin_hash=row["plugin_hash"], plugin_dir=None, fixture_hash=None, scenario_hash=None,
                rubric_hash=None, rules_hash=None, manifest_json=None, confinement="n/a", stderr="",
                n_lines=5, n_malformed=0, recorder_version="sim", host="sim", options_json="{}",
            )
        )  # fmt: skip
        events += _events(row)
        score_rows.append(
            ScoreRecord(
                scored_at=row["started_at"] + dt.timedelta(hours=1),
                **{k: row[k] for k in ScoreRecord.model_fields if k != "scored_at" and k in row},
            )
        )
    ev = to_frame("events", events)
    for rid, n in (extra_events or {}).items():
        base = ev.filter(pl.col("run_id") == rid).tail(1)
        more = pl.concat([base] * n).with_columns(
            seq=pl.int_range(5, 5 + n, dtype=pl.Int64),
            type=pl.lit("assistant"),
            block_type=pl.lit("text"),
            text=pl.format("line {} of a very long session", pl.int_range(5, 5 + n)),
        )
        ev = pl.concat([ev, more.cast(ev.schema)])  # type: ignore[arg-type]
    for table, frame in (
        ("events", ev.sort("run_id", "seq")),
        ("artifacts", to_frame("artifacts", [])),
        ("runs", to_frame("runs", runs).sort("run_id")),
        ("scores", to_frame("scores", score_rows)),
    ):
        frame.write_parquet(root / table / "folded-000001.parquet", row_group_size=5000)
    return archive


@pytest.fixture(scope="module")
def big_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pl.DataFrame]:
    scores = simulate_scores(reps=625, seed=5, invalid_rate=0.05)
    assert scores.height == 10_000
    root = tmp_path_factory.mktemp("big") / "archive"
    write_compacted(root, scores)
    out = root.parent / "report.html"
    rep.build_report(root, out)
    return out, scores


def test_ten_thousand_runs_make_a_small_page(big_report: tuple[Path, pl.DataFrame]) -> None:
    """Every run has its block and summary line, but no event row is in the page: each run's
    events are pages in report.runs/, one per run here (5 events each)."""
    out, scores = big_report
    page = out.read_text()
    assert out.stat().st_size < 16_000_000  # plotly.js alone is ~4.8 MB
    assert page.count('<details id="run-') == 10_000
    assert not re.search(r'id="run-[0-9a-f]+-seq-\d+"', page)
    srcs = re.findall(r'data-src="report\.runs/([0-9a-f]+)" data-pages="0"', page)
    assert len(srcs) == 10_000
    assert {p.name for p in rep.sidecar_dir(out).iterdir()} == {f"{k}-1.js" for k in srcs}
    row = scores.row(0, named=True)
    assert f'<details id="run-{row["run_id"]}" data-src=' in page


class TestBigReportInBrowser:
    def _chromium(self, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
        assert Path(CHROMIUM).exists(), f"{CHROMIUM} missing: scripts/setup installs Debian chromium"
        profile = tmp_path / "profile"
        profile.mkdir(exist_ok=True)
        return subprocess.run(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=20000", *args],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    def test_renders_and_a_transcript_loads_on_demand(self, big_report, tmp_path) -> None:
        """Opened at a deciding event of one run: the charts render, that run's events are loaded
        from its page file with the deciding rows highlighted, and no other run's events are."""
        out, scores = big_report
        row = scores.filter(pl.col("axis_a").fill_null(False)).row(1234, named=True)
        rid, seq = row["run_id"], row["evidence_a"][0]
        res = self._chromium(tmp_path, "--dump-dom", f"{out.as_uri()}#run-{rid}-seq-{seq}")
        assert res.returncode == 0, res.stderr[-2000:]
        dom = res.stdout
        after = dom.split('id="fig-grid"', 1)[1][:20000]
        assert 'class="main-svg"' in after
        assert dom.count("<details") == 10_000
        block = dom.split(f'<details id="run-{rid}"', 1)[1].split("</details>", 1)[0]
        assert re.search(rf'<tr class="ev-a[^"]*" id="run-{rid}-seq-{seq}">', block), block[:3000]
        assert block.count("<tr") == 1 + 5  # the header and the run's five events
        assert dom.count('<tr class="') == 5  # no other run's events were loaded

    def test_a_long_transcript_is_paged(self, tmp_path) -> None:
        """A run of 200,000 events: the page stays small, its events are 400 pages of 500, and a
        link to an event on the last page loads that page (with a pager) in the browser."""
        scores = simulate_scores(reps=2, seed=9)
        rid = scores["run_id"][0]
        root = tmp_path / "archive"
        write_compacted(root, scores, {rid: 199_995})
        out = tmp_path / "long.html"
        rep.build_report(root, out)
        assert out.stat().st_size < 6_000_000
        files = list(rep.sidecar_dir(out).glob("*.js"))
        assert len(files) == 400 + scores.height - 1
        assert max(f.stat().st_size for f in files) < 500_000
        res = self._chromium(tmp_path, "--dump-dom", f"{out.as_uri()}#run-{rid}-seq-199990")
        assert res.returncode == 0, res.stderr[-2000:]
        block = res.stdout.split(f'<details id="run-{rid}"', 1)[1].split("</details>", 1)[0]
        assert f'id="run-{rid}-seq-199990"' in block and "Events page 400 of 400" in block
        assert f'id="run-{rid}-seq-5"' not in block  # page 1 was never loaded
