"""The HTML report: its content from a small archive, the CLI, and a real headless Chromium rendering it."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from analysis.degradation import degradation_table, status_label
from analysis.frames import load_scores
from analysis.plots import plotly_js
from analysis.report import build_report
from cli.app import invoke
from cli.report import app

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# The flags this machine needs for headless Chromium (docs: .library/env/machines/python.md).
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


@pytest.fixture(scope="module")
def report_file(small_archive: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report") / "report.html"
    build_report(small_archive, out)
    return out


@pytest.fixture(scope="module")
def recorded_report(stochastic_archive: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report of an archive recorded with the real client and the stochastic scripted policy."""
    out = tmp_path_factory.mktemp("report") / "recorded.html"
    build_report(stochastic_archive, out)
    return out


class TestReportContent:
    def test_offline_no_cdn(self, report_file):
        """plotly.js is inlined: no script or stylesheet is fetched, from a CDN or anywhere."""
        page = report_file.read_text()
        assert not re.search(r"<script[^>]+src=", page)
        assert not re.search(r"<link[^>]+href=", page)
        assert plotly_js()[:2000] in page

    def test_every_run_has_a_drilldown_with_evidence_highlighted(self, report_file, small_archive):
        """Each run gets a <details id=run-…>, and its evidence seqs are the highlighted rows."""
        page = report_file.read_text()
        scores = load_scores(small_archive)
        for r in scores.head(20).iter_rows(named=True):
            block = page.split(f'<details id="run-{r["run_id"]}">', 1)[1].split("</details>", 1)[0]
            for seq in r["evidence_a"]:
                assert re.search(rf'<tr class="ev-a[^"]*" id="run-{r["run_id"]}-seq-{seq}">', block)
            for seq in r["evidence_b"]:
                assert re.search(rf'<tr class="[^"]*ev-b" id="run-{r["run_id"]}-seq-{seq}">', block)
            highlighted = len(re.findall(r'<tr class="ev-', block))
            assert highlighted == len(set(r["evidence_a"]) | set(r["evidence_b"]))

    def test_recorded_archive_drilldown(self, recorded_report, stochastic_archive):
        """On a real recording, every scored run has a drill-down with its real events and evidence."""
        page = recorded_report.read_text()
        scores = load_scores(stochastic_archive)
        assert page.count('<details id="run-') == scores.height
        for r in scores.iter_rows(named=True):
            for seq in set(r["evidence_a"]) | set(r["evidence_b"]):
                assert f'id="run-{r["run_id"]}-seq-{seq}"' in page

    def test_sections(self, report_file):
        """Grid, cells, reps, paired, planning, costs and runs sections are all there."""
        page = report_file.read_text()
        for section in ("grid", "cells", "degradation", "reps", "paired", "planning", "costs", "runs"):
            assert f"<h2 id='{section}'>" in page

    def test_degradation_and_pass_k(self, report_file, small_archive):
        """The degradation table has one row per model × plugin with the same counts and verdict as the
        library computes, and the cell table carries pass^2 and pass^3."""
        page = report_file.read_text()
        table = degradation_table(load_scores(small_archive))
        assert table.height == 4  # 2 models × 2 plugins
        section = page.split("<h2 id='degradation'>", 1)[1].split("<h2", 1)[0]
        assert section.count("<tr>") == 1 + table.height
        for r in table.iter_rows(named=True):
            assert f"<td>{status_label(r)}</td>" in section
        cells = page.split("<h2 id='cells'>", 1)[1].split("<h2", 1)[0]
        assert "<th>pass^2</th><th>pass^3</th>" in cells and "C(c,k)/C(n,k)" in cells

    def test_plan_is_capped_and_says_so(self, report_file):
        """The rep plan never shows a minimum detectable difference above 1, and has a detectable column."""
        plan = report_file.read_text().split("<h2 id='planning'>", 1)[1].split("<h2", 1)[0]
        assert "<th>detectable</th>" in plan and "capped at 1" in plan
        head, body = plan.split("<tbody>", 1)
        col = re.findall(r"<th>(\w+)</th>", head).index("mde")
        for row in re.findall(r"<tr>(.*?)</tr>", body):
            assert float(re.findall(r"<td[^>]*>(.*?)</td>", row)[col]) <= 1.0


class TestCli:
    def test_writes_report(self, small_archive, tmp_path):
        """`report --archive A --out F` writes F and prints its path."""
        out = tmp_path / "r.html"
        res = CliRunner().invoke(app, ["--archive", str(small_archive), "--out", str(out)])
        assert res.exit_code == 0, res.output
        assert res.output.strip() == str(out) and out.stat().st_size > 100_000

    def test_missing_archive_is_one_line_error(self, tmp_path):
        """A path that is no archive gives exit 2 and one line naming it, through the CLI's boundary."""
        err = io.StringIO()
        code = invoke(
            app, "evalb report", ["--archive", str(tmp_path / "nope"), "--out", str(tmp_path / "r.html")], err
        )
        assert code == 2
        lines = err.getvalue().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and "is not an evalb archive" in lines[0]


class TestInBrowser:
    def _chromium(self, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
        assert Path(CHROMIUM).exists(), f"{CHROMIUM} missing: scripts/setup installs Debian chromium"
        profile = tmp_path / "profile"
        profile.mkdir(exist_ok=True)
        return subprocess.run(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=10000", *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    @pytest.mark.parametrize(
        "which", ["report_file", pytest.param("recorded_report", marks=pytest.mark.client)]
    )
    def test_plotly_renders_every_chart(self, which, tmp_path, request):
        """After scripts run, each chart div holds plotly's svg and the tables are in the DOM."""
        report_file = request.getfixturevalue(which)
        res = self._chromium(tmp_path, "--dump-dom", report_file.as_uri())
        dom = res.stdout
        assert res.returncode == 0, res.stderr[-2000:]
        charts = re.findall(r'<div id="fig-([\w-]+)"', report_file.read_text())
        assert {"grid", "cells", "cells-a", "cells-b", "reps", "paired-0", "power"} <= set(charts)
        for name in charts:
            after = dom.split(f'id="fig-{name}"', 1)[1][:20000]
            assert 'class="main-svg"' in after, f"chart {name} did not render"
        assert dom.count("<table") >= 6
        assert dom.count("<details") == report_file.read_text().count("<details")

    def test_screenshot(self, report_file, tmp_path):
        """A screenshot is a real, non-trivial PNG."""
        png = tmp_path / "report.png"
        res = self._chromium(tmp_path, "--window-size=1300,3000", f"--screenshot={png}", report_file.as_uri())
        assert res.returncode == 0, res.stderr[-2000:]
        data = png.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 50_000


class TestRefusals:
    """Every mistake is one typed error from the library and one line + non-zero exit from the CLI,
    never a traceback; refusals come before anything is written."""

    @staticmethod
    def _empty(root: Path) -> Path:
        from evalb.archive import Archive

        Archive.create_or_open(root)
        return root

    @staticmethod
    def _cli(archive: Path, out: Path) -> subprocess.CompletedProcess[str]:
        script = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "evalb"
        return subprocess.run(
            [str(script), "report", "--archive", str(archive), "--out", str(out)],
            capture_output=True,
            text=True,
            timeout=120,
        )

    @pytest.mark.parametrize(
        ("case", "match"),
        [
            ("empty", "has no runs to report on"),
            ("missing", "no such folder"),
            ("out-missing-folder", "does not exist"),
            ("out-is-folder", "is a directory"),
        ],
    )
    def test_refused_with_one_line(self, case, match, small_archive, tmp_path) -> None:
        from evalb.errors import EvalbError

        archive, out = small_archive, tmp_path / "report.html"
        if case == "empty":
            archive = self._empty(tmp_path / "a")
        elif case == "missing":
            archive = tmp_path / "typo"
        elif case == "out-missing-folder":
            out = tmp_path / "no" / "such" / "report.html"
        else:
            out = tmp_path
        with pytest.raises(EvalbError, match=match):
            build_report(archive, out)
        assert not (tmp_path / "report.html").exists()
        res = self._cli(archive, out)
        assert res.returncode != 0 and match in res.stderr
        assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
        assert not (tmp_path / "report.html").exists() and not (tmp_path / "typo").exists()

    def test_a_quote_in_the_archive_path(self, small_archive, tmp_path) -> None:
        """The archive path goes to DuckDB as a value: a `'` in it works."""
        root = tmp_path / "bob's archive"
        shutil.copytree(small_archive, root)
        out = tmp_path / "r.html"
        build_report(root, out)
        assert out.stat().st_size > 0 and '<details id="run-' in out.read_text()


def _tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


class TestJustImported:
    """`evalb report` on an archive with runs and no scores renders, scoring in memory: the archive
    is byte-identical afterwards (no scores, no judgements written)."""

    def test_imported_transcript_renders(self, tmp_path) -> None:
        from evalb.archive import Archive
        from runner.importer import import_transcript
        from tests.conftest import GOLDEN

        root = tmp_path / "a"
        run = import_transcript(
            GOLDEN / "no-plugin.jsonl", Archive.create_or_open(root), scenario="R1", model="haiku"
        )
        assert run is not None
        before = _tree_bytes(root)
        out = tmp_path / "r.html"
        res = TestRefusals._cli(root, out)
        assert res.returncode == 0, res.stderr
        assert "Traceback" not in res.stderr
        page = out.read_text()
        assert f'<details id="run-{run.run_id}"' in page
        assert _tree_bytes(root) == before

    def test_unjudged_w_runs_get_a_banner(self, tmp_path, monkeypatch) -> None:
        """A W run whose judge cannot run is shown not judged, with a banner naming evalb-score."""
        from evalb.archive import Archive
        from tests.checker.helpers import Runs, hooked

        root = tmp_path / "a"
        Runs(root).add("w", hooked().text("Done.").result("Done.").lines, "W1")
        before = _tree_bytes(root)
        monkeypatch.setenv("ADR_EVAL_B_JUDGE_CMD", "false")
        page = build_report(Archive.open(root), tmp_path / "r.html")
        assert "id='banner'" in page and "evalb-score --archive" in page and "1 W run not judged" in page
        assert "not judged (no judge could run)" in page  # the run's own line says so too
        assert '<details id="run-' in page
        assert _tree_bytes(root) == before


def test_a_long_hash_shows_eight_characters_and_the_whole_on_hover() -> None:
    """A 64-character plugin hash would push every table sideways: 8 characters, full in the title;
    a model name in a comparison column is never cut."""
    import polars as pl

    from analysis.report import table_html

    h = "ab12cd34" + "e" * 56
    page = table_html(pl.DataFrame({"plugin_hash": [h], "a": ["claude-sonnet-4-5-20250929"], "n": [3]}))
    assert f'title="{h}"' in page and "<code>ab12cd34</code>" in page
    assert page.count(h) == 1  # only in the title
    assert "claude-sonnet-4-5-20250929</td>" in page
