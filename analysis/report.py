"""The static HTML report: grid and cell tables with error bars, charts, paired comparisons, a rep
plan, costs, and a drill-down from every run to its transcript with the deciding events highlighted.

One self-contained file: plotly.js is inlined once, so it opens offline from disk. `render_report`
is pure (frames in, HTML out); `build_report` reads an archive and writes the file.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import html
import itertools
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from urllib.parse import quote

import plotly.graph_objects as go
import polars as pl

from analysis import batches as batching
from analysis import plots
from analysis.costs import cell_costs, plan_cost
from analysis.degradation import ALPHA, degradation_table, status_label
from analysis.frames import check_columns
from analysis.paired import PairedResult, compare, compare_table
from analysis.power import components_from_pilot, plan_table, power_curve
from analysis.stats import cell_table, grid_table, needless_table
from evalb.archive import LATEST_RUN_COLUMNS, Archive
from evalb.errors import ConfigurationError, UsageError
from evalb.schema import columns

EVENT_COLUMNS = (
    "run_id",
    "seq",
    "block_index",
    "type",
    "subtype",
    "block_type",
    "tool_name",
    "tool_input",
    "text",
)
_HEX = re.compile(r"[0-9a-f]{16,}")
HASH_COLUMNS = frozenset({"plugin_hash", "a", "b", "checker_hash"})  # shown as 8 chars + title
TEXT_LIMIT = 1500  # characters of an event's text shown; the archive keeps it all
PLAN_REPS = [1, 2, 3, 5, 8, 10, 15, 20, 30]
GRID_COLUMNS = (
    "model_alias", "plugin_hash", "axis", "mean", "lo", "hi", "se", "se_clustered", "n_clusters",
    "se_reps_only", "var_within", "var_between", "n_scenarios", "reps_mean",
)  # fmt: skip
CELL_COLUMNS = (
    "variant", "model_alias", "plugin_hash", "n_runs", "n_invalid", "n_valid", "passes", "rate", "lo", "hi",
    "klass", "pass^2", "pass^3", "a_passes", "a_rate", "a_lo", "a_hi", "b_passes", "b_rate", "b_lo", "b_hi",
)  # fmt: skip
PAIR_COLUMNS = (
    "within", "by", "a", "b", "n_pairs", "mean_a", "mean_b", "diff", "lo", "hi", "se", "p_value", "corr",
    "se_unpaired", "se_reps_only",
)  # fmt: skip

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2rem auto;max-width:1200px;color:#222;padding:0 1rem}
h1{font-size:1.6rem}h2{margin-top:2.5rem;border-bottom:1px solid #ddd;padding-bottom:.3rem}
table{border-collapse:collapse;font-size:.85rem;margin:.5rem 0 1rem}
th,td{border:1px solid #ddd;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.ev-a td{background:#fff3c4}tr.ev-b td{background:#d6ecff}tr.ev-a.ev-b td{background:#e3d7ff}
.PASS{color:#1a7f37;font-weight:600}.FAIL{color:#c62828;font-weight:600}.INVALID{color:#777;font-weight:600}
.note{color:#555;font-size:.9rem;max-width:60rem}
details{margin:.3rem 0;border:1px solid #eee;padding:.3rem .6rem}details[open]{background:#fcfcfc}
pre{white-space:pre-wrap;margin:0;font-size:.8rem;max-height:20rem;overflow:auto}
.scroll{overflow-x:auto}.figrow{display:flex;flex-wrap:wrap;gap:1rem}
.banner{background:#fff3c4;border:1px solid #e0c060;padding:.5rem .8rem}
.legend span{padding:.1rem .5rem;margin-right:.5rem}
.events:empty::before{content:"loading the events (pages beside the report, in the .runs folder)";color:#777}
"""

_JS = """
function openTarget(){var id=decodeURIComponent(location.hash.slice(1));if(!id)return;
var el=document.getElementById(id);
if(!el){var m=id.match(/^(run-.*)-seq-(\\d+)$/);var r=m&&document.getElementById(m[1]);
 if(r&&r.dataset.src){r.open=true;evalbLoad(r,evalbPageOf(r,+m[2]),openTarget);}return;}
var d=el.closest('details');
while(d){d.open=true;d=d.parentElement.closest('details');}el.scrollIntoView();}
window.addEventListener('hashchange',openTarget);window.addEventListener('load',openTarget);
var evalbWaiting={};
function evalbPageOf(d,seq){var p=d.dataset.pages.split(',').map(Number),k=0;
 for(var i=0;i<p.length;i++){if(p[i]<=seq)k=i;}return k+1;}
function evalbLoad(d,page,then){var box=d.querySelector('.events');
 if(box.dataset.page==String(page)){if(then)then();return;}
 box.dataset.want=String(page);evalbWaiting[d.id]=then||null;var s=document.createElement('script');
 s.src=d.dataset.src+'-'+page+'.js';s.onerror=function(){box.innerHTML=
 '<p class="note">Transcript page '+s.src+' could not be loaded (is the folder beside the report?).</p>';};
 document.head.appendChild(s);}
function evalbPage(runId,page,body){var d=document.getElementById('run-'+runId);if(!d)return;
 var n=d.dataset.pages.split(',').length,box=d.querySelector('.events'),nav='';
 if(box.dataset.want!==String(page))return;
 if(n>1){nav='<p class="pager">Events page '+page+' of '+n+' '+
  (page>1?'<button data-go="'+(page-1)+'">previous</button> ':'')+
  (page<n?'<button data-go="'+(page+1)+'">next</button>':'')+'</p>';}
 box.innerHTML=nav+body+nav;box.dataset.page=String(page);
 box.querySelectorAll('button[data-go]').forEach(function(b){b.onclick=function(){evalbLoad(d,+b.dataset.go);};});
 var then=evalbWaiting[d.id];evalbWaiting[d.id]=null;if(then)then();}
document.addEventListener('toggle',function(e){var d=e.target;
 if(d.open&&d.dataset&&d.dataset.src&&!d.querySelector('.events').dataset.want)evalbLoad(d,1);},true);
"""


def _fmt(v: object) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 1000 else f"{v:,.0f}"
    if isinstance(v, list):
        return ", ".join(str(x) for x in v)
    return html.escape(str(v))


def _cell(column: str, v: object, numeric: bool) -> str:
    if column in HASH_COLUMNS and isinstance(v, str) and _HEX.fullmatch(v):
        return f'<td title="{html.escape(v)}"><code>{html.escape(v[:8])}</code></td>'
    return f'<td class="num">{_fmt(v)}</td>' if numeric else f"<td>{_fmt(v)}</td>"


def table_html(df: pl.DataFrame, cls: str = "") -> str:
    """A frame as an escaped HTML table (numbers right-aligned, floats to 3 places; a hash shows 8
    characters, the whole on hover)."""
    numeric = {c for c, t in df.schema.items() if t.is_numeric()}
    head = "".join(f"<th>{html.escape(c)}</th>" for c in df.columns)
    body = []
    for row in df.iter_rows():
        cells = "".join(_cell(c, v, c in numeric) for c, v in zip(df.columns, row, strict=True))
        body.append(f"<tr>{cells}</tr>")
    return (
        f'<div class="scroll"><table class="{cls}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def _comparisons(scores: pl.DataFrame) -> list[tuple[str, pl.DataFrame, PairedResult]]:
    """(context, subset, result) for every model pair within each plugin and every plugin pair within each model."""
    out = []
    for plugin in sorted(scores["plugin_hash"].unique().to_list()):
        sub = scores.filter(pl.col("plugin_hash") == plugin)
        for a, b in itertools.combinations(sorted(sub["model_alias"].unique().to_list()), 2):
            out.append((f"plugin {plugin[:8]}", sub, compare(sub, a, b, by="model_alias")))
    for model in sorted(scores["model_alias"].unique().to_list()):
        sub = scores.filter(pl.col("model_alias") == model)
        for a, b in itertools.combinations(sorted(sub["plugin_hash"].unique().to_list()), 2):
            out.append((f"model {model}", sub, compare(sub, a, b, by="plugin_hash")))
    return [c for c in out if c[2].n_pairs >= 2]


def _events_table(rid: str, events: list[dict], ev_a: set[int], ev_b: set[int]) -> str:
    """A run's events (or one page of them) as a table, deciding rows highlighted and anchored."""
    rows = []
    anchored: set[int] = set()
    for e in events:
        seq = e["seq"]
        cls = " ".join(c for c, s in (("ev-a", ev_a), ("ev-b", ev_b)) if seq in s)
        anchor = ""
        if seq not in anchored:
            anchor = f' id="run-{rid}-seq-{seq}"'
            anchored.add(seq)
        body = e["tool_input"] if e["block_type"] == "tool_use" else e["text"]
        body = body or ""
        clipped = body[:TEXT_LIMIT] + (
            f" … [{len(body) - TEXT_LIMIT} more chars]" if len(body) > TEXT_LIMIT else ""
        )
        rows.append(
            f'<tr class="{cls}"{anchor}><td class="num">{seq}</td><td>{_fmt(e["type"])}</td>'
            f"<td>{_fmt(e['subtype'])}</td><td>{_fmt(e['block_type'])}</td><td>{_fmt(e['tool_name'])}</td>"
            f"<td><pre>{html.escape(clipped)}</pre></td></tr>"
        )
    if not rows:
        return "<p class='note'>No events archived for this run.</p>"
    return (
        "<table><thead><tr><th>seq</th><th>type</th><th>subtype</th><th>block</th><th>tool</th>"
        f"<th>input / text</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _evidence(r: dict) -> tuple[set[int], set[int]]:
    return set(r["evidence_a"] or []), set(r["evidence_b"] or [])


def _run_details(
    scores: pl.DataFrame, events: pl.DataFrame, transcripts: dict[str, tuple[str, list[int]]] | None = None
) -> str:
    """One collapsible block per run: its verdict and reasons, then its events, deciding ones
    highlighted; with `transcripts` (run_id -> (sidecar file prefix, first seq of each page)) the
    events are not in the page but loaded from the sidecar files when the block is opened."""
    by_run = (
        events.partition_by("run_id", as_dict=True, maintain_order=True)
        if events.height and transcripts is None
        else {}
    )
    blocks = []
    for r in scores.sort(["model_alias", "plugin_hash", "variant", "rep"]).iter_rows(named=True):
        rid = r["run_id"]
        ev_a, ev_b = _evidence(r)
        links = " ".join(
            f'<a href="#run-{rid}-seq-{s}">{label}{s}</a>'
            for label, seqs in (("a:", sorted(ev_a)), ("b:", sorted(ev_b)))
            for s in seqs
        )
        attrs = ""
        if transcripts is not None and rid in transcripts:
            src, pages = transcripts[rid]
            attrs = f' data-src="{html.escape(src)}" data-pages="{",".join(map(str, pages))}"'
            events_html = "<div class='events'></div>"
        else:
            ev = by_run.get((rid,), pl.DataFrame())
            events_html = _events_table(rid, list(ev.iter_rows(named=True)), ev_a, ev_b)
        verdict = r["verdict"]
        blocks.append(
            f'<details id="run-{rid}"{attrs}><summary><span class="{verdict}">{verdict}</span> '
            f"{_fmt(r['variant'])} · {_fmt(r['model_alias'])} · {_fmt(r['plugin_hash'][:8])} · rep {r['rep']} "
            f"— {_fmt(r['reasons'])} <small>(run {rid[:12]})</small></summary>"
            f"<p>Deciding events: {links or '—'}</p>{events_html}</details>"
        )
    return "\n".join(blocks)


def _degradation_section(scores: pl.DataFrame) -> list[str]:
    """The degradation checks: each expect_b: fail variant's (b) FAIL read against its base's (b) PASS."""
    table = degradation_table(scores)
    if table.is_empty():
        return []
    shown = table.with_columns(
        verdict=pl.Series([status_label(r) for r in table.iter_rows(named=True)], dtype=pl.String)
    ).select(
        "model_alias", "plugin_hash", "base", "base_b_pass", "base_n", "variant", "var_b_fail", "var_n",
        "p_value", "verdict", "detail",
    )  # fmt: skip
    return [
        "<h2 id='degradation'>Degradation checks</h2>",
        "<p class='note'>A degradation variant (e.g. R4-nograph: same task, code graph absent) is expected to "
        "fail axis (b); that FAIL means something only next to a PASS of its base variant on the same model "
        "and plugin. <b>confirmed</b>: the base passes (b) more often than the variant, one-sided Fisher exact "
        f"test p ≤ {ALPHA} (needs ≥ 3 valid reps in each cell); <b>not shown</b>: the base passes (b) at least "
        "once but the difference is not significant; <b>… not passing</b>: the base never passed (b), so the "
        "check says nothing. Valid runs only.</p>",
        table_html(shown),
    ]


def _arms_section(scores: pl.DataFrame, fig: Callable[[go.Figure, str], str]) -> list[str]:
    """The comparison view: arms side by side per scenario, the decisions (`evalb compare`), and the
    sequential path of each candidate against the baseline. Empty with fewer than two arms."""
    from analysis.compare import arms_present, compare_arms, resolve_arms
    from analysis.compare_view import arms_figure, path_figure
    from analysis.sequential import decide

    arms = arms_present(scores)
    if len(arms) < 2:
        return []
    try:
        base, cands = resolve_arms(scores)
    except UsageError:
        base, cands = arms[0], arms[1:]
    result = compare_arms(scores, baseline=base, arms=[base, *cands])
    table = result.table().select(
        "candidate", "baseline", "n_pairs", "pass_baseline", "pass_candidate", "diff", "lo", "hi", "p_value",
        "p_adjusted", "needless_diff", "needless_lo", "needless_hi", "decision",
    )  # fmt: skip
    parts = [
        "<h2 id='arms'>Arms compared</h2>",
        f"<p class='note'>Each candidate against the baseline arm <b>{html.escape(base)}</b>, paired by "
        "scenario (variant × model): the pass-rate difference over the ordinary scenarios with its 95% "
        "interval, the difference of the needless rate over the over-triggering scenarios beside it, and the "
        "decision with Holm's correction for the number of candidates (docs/statistics.md, <i>Comparing "
        "arms</i>). The same table: <code>evalb compare</code>.</p>",
        table_html(table),
        fig(arms_figure(result), "arms"),
        "<p class='note'>Sequential path: the anytime-valid 95% confidence sequence for each candidate's "
        "difference, pair by pair in recording order; the rule decides once it excludes 0 (docs/statistics.md, "
        "<i>Sequential stopping</i>).</p>",
    ]
    figs = []
    for i, c in enumerate(cands[:4]):
        d = decide(scores, (base, c))
        if d.n_pairs:
            figs.append(fig(path_figure(d, base, c), f"arms-path-{i}"))
    parts.append(f"<div class='figrow'>{''.join(figs)}</div>")
    return parts


def _needless_section(scores: pl.DataFrame) -> list[str]:
    """Over-triggering: the needless rate per model × plugin, beside the grid pass rate (not in it)."""
    table = needless_table(scores)
    if table.is_empty():
        return []
    return [
        "<h2 id='needless'>Needless rate (over-triggering scenarios)</h2>",
        "<p class='note'>On the O scenarios the task needs no decision record: a run is <em>needless</em> "
        "when it consulted docs/adr (or the plugin) or proposed an ADR anyway. Lower is better. These "
        "scenarios are not in the grid pass rate above; a wording that raises it by opening docs/adr "
        "on every task shows here. <code>passes</code>: task done and not needless.</p>",
        table_html(table),
    ]


def render_report(
    scores: pl.DataFrame,
    events: pl.DataFrame,
    title: str = "evalb report",
    source: str = "",
    banner: str = "",
    transcripts: dict[str, tuple[str, list[int]]] | None = None,
) -> str:
    """The whole report as one HTML string, from a score frame (frames.COLUMNS + derived) and its
    events; with `transcripts` the events stay in sidecar files (see `write_transcripts`)."""

    def fig(f: go.Figure, name: str) -> str:
        return plots.figure_div(f, f"fig-{name}")

    cells = cell_table(scores)
    grids = pl.concat(
        [grid_table(scores, axis=a) for a in ("passed", "axis_a", "axis_b")], how="diagonal_relaxed"
    )
    comparisons = _comparisons(scores)
    parts = [
        f"<h1>{html.escape(title)}</h1>",
        f"<p class='banner' id='banner'>{html.escape(banner)}</p>" if banner else "",
        f"<p class='note'>Archive: <code>{html.escape(source)}</code> · generated "
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC · {scores.height} scored runs "
        f"({int((~scores['valid']).sum())} INVALID, excluded from every rate) · "
        f"checker {', '.join(sorted(set(scores['checker_hash'].to_list())))[:80]}</p>",
        "<nav class='note'>Sections: <a href='#grid'>grid</a> · <a href='#needless'>needless</a> · <a href='#cells'>cells</a> · "
        "<a href='#degradation'>degradation</a> · <a href='#arms'>arms</a> · <a href='#reps'>every rep</a> · <a href='#paired'>paired</a> · <a href='#planning'>planning</a> · "
        "<a href='#costs'>costs</a> · <a href='#runs'>runs</a></nav>",
        "<p class='note'>Intervals are 95%. Cell intervals are Wilson intervals over valid reps. Grid means "
        "average the reps within each scenario first, then over the 7 primary scenarios (degradation variants "
        "such as R4-nograph left out); their interval is a t interval on Miller's CLT standard error. "
        "See docs/statistics.md for how to read every column.</p>",
        "<h2 id='grid'>Grid pass rate</h2>",
        table_html(grids.select(GRID_COLUMNS)),
        fig(plots.grid_figure(grids.filter(pl.col("axis") == "passed")), "grid"),
        *_needless_section(scores),
        "<h2 id='cells'>Cells</h2>",
        fig(plots.cell_rates_figure(cells, "passed"), "cells"),
        fig(plots.cell_rates_figure(cells, "axis_a"), "cells-a"),
        fig(plots.cell_rates_figure(cells, "axis_b"), "cells-b"),
        table_html(cells.select(CELL_COLUMNS)),
        "<p class='note'>pass^k: the chance that k reps of a cell all pass, estimated without bias from c "
        "passes in n valid reps as C(c,k)/C(n,k) (Yao et al., τ-bench); empty when n &lt; k.</p>",
        *_degradation_section(scores),
        *_arms_section(scores, fig),
        "<h2 id='reps'>Every rep</h2>",
        fig(plots.rep_grid_figure(scores), "reps"),
    ]
    if comparisons:
        table = compare_table([r for _, _, r in comparisons]).with_columns(
            within=pl.Series([ctx for ctx, _, _ in comparisons])
        )
        parts += [
            "<h2 id='paired'>Paired comparisons (B − A, paired by scenario)</h2>",
            table_html(table.select(PAIR_COLUMNS)),
        ]
        figs = [
            fig(plots.paired_figure(r, context=ctx), f"paired-{i}")
            for i, (ctx, _, r) in enumerate(comparisons[:4])
        ]
        parts.append(f"<div class='figrow'>{''.join(figs)}</div>")
        ctx, sub, first = comparisons[0]
        try:
            comp = components_from_pilot(sub, first.a, first.b, by=first.by)
        except ValueError:
            comp = None
        if comp is not None:
            parts += [
                f"<h2 id='planning'>Rep planning ({html.escape(first.b)} vs {html.escape(first.a)}, "
                f"{html.escape(ctx)})</h2>",
                f"<p class='note'>From this archive: ω² = {comp.omega2:.4f} (scenario-to-scenario spread of the "
                f"true difference), σ²_A = {comp.sigma2_a:.3f}, σ²_B = {comp.sigma2_b:.3f} (rep-level variance), "
                f"{comp.n_scenarios} scenarios. {html.escape(comp.note)} Minimum detectable difference at 80% "
                "power, two-sided 5% paired t-test, by reps per cell (capped at 1, the largest possible "
                "difference of pass rates; <code>detectable</code> is false where the formula exceeds it):</p>",
                table_html(plan_table(comp, PLAN_REPS)),
                fig(plots.power_curve_figure(power_curve(comp, [0.1, 0.2, 0.3], PLAN_REPS)), "power"),
            ]
    parts += [
        "<h2 id='costs'>Cost and time</h2>",
        table_html(cell_costs(scores)),
        *(
            [
                "<p class='note'>Scripted models (<code>scripted:*</code>) run the bundled loopback model: "
                "they are never paid for and cost $0 here (n/a (scripted)), whatever the client reported.</p>"
            ]
            if scores["model_alias"].str.starts_with("scripted:").any()
            else []
        ),
        "<p class='note'>What 10 valid reps per cell would cost, priced from this archive (invalid share "
        "bought back):</p>",
        table_html(plan_cost(scores, 10).filter(pl.col("variant") == "TOTAL")),
        "<h2 id='runs'>Runs</h2>",
        "<p class='legend'><span style='background:#fff3c4'>decided axis (a)</span>"
        "<span style='background:#d6ecff'>decided axis (b)</span><span style='background:#e3d7ff'>both</span></p>",
        _run_details(scores, events, transcripts),
    ]
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{_CSS}</style>"
        f"<script type='text/javascript'>{plots.plotly_js()}</script><script>{_JS}</script></head>"
        f"<body>{''.join(parts)}</body></html>"
    )


def read_events(archive: Archive | Path | str, run_ids: list[str]) -> pl.DataFrame:
    """The events of the given runs, in order, with only the columns the drill-down shows."""
    arch = archive if isinstance(archive, Archive) else Archive.open(archive)
    con = arch.connect()
    try:
        con.register("wanted", pl.DataFrame({"run_id": run_ids}).to_arrow())
        cols = ", ".join(f"e.{c}" for c in EVENT_COLUMNS)
        return con.sql(
            f"""
            SELECT {cols}
            FROM events e JOIN wanted w USING (run_id)
            ORDER BY e.run_id, e.seq, e.block_index NULLS FIRST
            """
        ).pl()
    finally:
        con.close()


def check_out(out: Path | str) -> Path:
    """`out` if the report can be written there: its folder exists and it is not a folder itself."""
    out = Path(out)
    if out.is_dir():
        raise UsageError(
            f"--out {out} is a directory", hint=f"give a file name, e.g. --out {out / 'report.html'}"
        )
    if not out.parent.is_dir():
        raise UsageError(
            f"--out {out}: the directory {out.parent} does not exist",
            hint="create it first or pick another path",
        )
    return out


class _NotJudged:
    """A stand-in judge that answers nothing: its W runs come out unjudged (INVALID, not judged)."""

    name = "not judged"

    def ask(self, prompt: str) -> str:
        return "not judged"


def _score_in_memory(archive: Archive, run_ids: list[str]) -> tuple[pl.DataFrame, str]:
    """Score `run_ids` without writing anything, each with the judge it expects; when a judge cannot
    run, its W runs are left unjudged and the second value is a banner saying how to score them."""
    from analysis.checker import score_runs

    banner = ""
    try:
        fresh = score_runs(archive, run_ids, write=False).scores
    except ConfigurationError as e:
        fresh = score_runs(archive, run_ids, judge=_NotJudged(), write=False).scores
        fresh = fresh.with_columns(
            reasons=pl.col("reasons").str.replace(
                r"(the judge gave no verdict on the final message \(seq \d+\)): [^;]*",
                "${1}: not judged (no judge could run)",
            )
        )
        n = int(fresh["reasons"].str.contains("not judged").sum())
        reason = " ".join(str(e).split())[:160]
        banner = (
            f"{n} W run{'' if n == 1 else 's'} not judged ({reason}): shown as INVALID here. "
            f"Score them with a judge: evalb-score --archive {archive.root} (set ADR_EVAL_B_JUDGE_CMD "
            "or log the client in; see docs/scoring.md)."
        )
    runs = archive.read("runs", ["run_id", *LATEST_RUN_COLUMNS])
    frame = fresh.select(columns("scores")).join(runs, on="run_id", how="left")
    return frame, banner


def load_report_scores(archive: Archive) -> tuple[pl.DataFrame, str]:
    """The score frame the report reads, and a banner (empty when every run is judged).

    Runs without a score are scored in memory (nothing is written); an archive with no runs is a
    clear error."""
    if not archive.has_rows("runs"):
        raise UsageError(
            f"{archive.root} has no runs to report on", hint="record some first with evalb-record"
        )
    scores = archive.latest_scores()
    all_ids = archive.read("runs", ["run_id"])["run_id"].unique().to_list()
    scored = set(scores["run_id"].to_list())
    unscored = sorted(i for i in all_ids if i not in scored)
    banner = ""
    if unscored:
        fresh, banner = _score_in_memory(archive, unscored)
        fresh = fresh.select(scores.columns).cast(dict(scores.schema))  # type: ignore[arg-type]
        scores = pl.concat([scores, fresh]) if scores.height else fresh
    if scores.is_empty():
        raise UsageError(f"{archive.root} has runs but none could be scored", hint="see docs/scoring.md")
    return check_columns(scores), banner


#: Up to this many runs (and PAGE_EVENTS events in each) the report is one self-contained file;
#: beyond, every run's events go to a sidecar folder beside it, loaded when its block is opened.
INLINE_RUNS = 200
#: Events per transcript page in the sidecar folder (a page ends where a seq ends).
PAGE_EVENTS = 500


def _pages(events: list[dict]) -> list[list[dict]]:
    """`events` (one run's, in order) cut into pages of about PAGE_EVENTS rows, never inside a seq."""
    pages: list[list[dict]] = [[]]
    for e in events:
        page = pages[-1]
        if len(page) >= PAGE_EVENTS and page[-1]["seq"] != e["seq"]:
            pages.append(page := [])
        page.append(e)
    return pages


def sidecar_dir(out: Path) -> Path:
    """The folder of transcript pages beside report file `out` (`report.html` -> `report.runs/`)."""
    return out.with_name(f"{out.stem}.runs")


def _event_batches(arch: Archive, run_ids: list[str]) -> Iterator[pl.DataFrame]:
    """The drill-down's events of `run_ids`, a batch of runs at a time (bounded memory)."""
    where = batching.files_of(arch, run_ids, ["events"])
    for batch in batching.batches(pl.DataFrame({"run_id": run_ids}, schema={"run_id": pl.String})):
        lf = batching.batch_scan(where, "events", batch["run_id"].to_list())
        if lf is not None:
            yield lf.select(EVENT_COLUMNS).sort(["run_id", "seq", "block_index"], nulls_last=False).collect()


def write_transcripts(
    scores: pl.DataFrame, event_batches: Iterable[pl.DataFrame], folder: Path
) -> dict[str, tuple[str, list[int]]]:
    """Write each run's events as pages `folder/<key>-<page>.js` (each calls `evalbPage(run id,
    page, html)`); return run_id -> (the pages' URL prefix relative to the report, first seq of
    each page). Old pages in `folder` are removed first."""
    try:
        folder.mkdir(exist_ok=True)
        for old in folder.glob("*.js"):
            old.unlink()
    except OSError as e:
        raise UsageError(f"cannot write {folder}: {e.strerror}", hint="pick a writable --out") from e
    evidence = {
        r["run_id"]: _evidence(r)
        for r in scores.select("run_id", "evidence_a", "evidence_b").iter_rows(named=True)
    }
    out: dict[str, tuple[str, list[int]]] = {}
    prefix = quote(folder.name)
    for frame in event_batches:
        for (rid,), ev in frame.partition_by("run_id", as_dict=True, maintain_order=True).items():
            if rid not in evidence:
                continue
            key = hashlib.sha256(str(rid).encode()).hexdigest()[:20]
            pages = _pages(list(ev.iter_rows(named=True)))
            for n, page in enumerate(pages, 1):
                body = _events_table(str(rid), page, *evidence[rid])
                js = f"evalbPage({json.dumps(rid)},{n},{json.dumps(body)});\n"
                (folder / f"{key}-{n}.js").write_text(js, encoding="utf-8")
            out[str(rid)] = (f"{prefix}/{key}", [p[0]["seq"] for p in pages])
    return out


def build_report(
    archive: Archive | Path | str, out: Path | str | None = None, title: str = "evalb report"
) -> str:
    """Read the archive, render the report, write it to `out` if given; return the HTML.

    Up to INLINE_RUNS runs of at most PAGE_EVENTS events each, the report is one file with every
    transcript in it; beyond (and only when written to `out`), the transcripts go to the sidecar
    folder `sidecar_dir(out)`, paged, read from the archive a batch of runs at a time.
    Every refusal (not an archive, nothing scored, a bad --out) comes before any work is done."""
    if out is not None:
        out = check_out(out)
    arch = archive if isinstance(archive, Archive) else Archive.open(archive)
    scores, banner = load_report_scores(arch)
    run_ids = scores["run_id"].to_list()
    transcripts = None
    events = pl.DataFrame(schema={c: pl.String for c in EVENT_COLUMNS})
    if out is None or len(run_ids) <= INLINE_RUNS:
        events = read_events(arch, run_ids)
    if out is not None:
        if len(run_ids) > INLINE_RUNS:
            transcripts = write_transcripts(scores, _event_batches(arch, run_ids), sidecar_dir(out))
        elif events.height and events.group_by("run_id").len()["len"].max() > PAGE_EVENTS:  # type: ignore[operator]
            transcripts = write_transcripts(scores, [events], sidecar_dir(out))
    page = render_report(
        scores, events, title=title, source=str(arch.root), banner=banner, transcripts=transcripts
    )
    if out is not None:
        try:
            out.write_text(page, encoding="utf-8")
        except OSError as e:
            raise UsageError(f"cannot write --out {out}: {e.strerror}", hint="pick a writable path") from e
    return page
