"""The labelled rule corpus (analysis/rules/cases/*.yaml) run through the real rule connection.

A case's `ok` is the true label. A documented known limit also carries `rule_says` (what the rule
answers instead); the test then requires that answer, so a fix shows up, and precision/recall are
computed against the label, so the limit counts against the rule.

Every case becomes one fabricated run (hook, init, one assistant text block per message, a
neutral result), parsed by evalb.transcript like a recorded run, loaded in memory through
`analysis.checker.connect_frames` (the path `rule_connection` takes after reading the archive)
with all rules run; the case's rule table is then read for its `ok`.

    .venv/bin/python -m tests.checker.corpus   # per-rule precision/recall and cases per class
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl
import yaml

from analysis import checker
from analysis import fabricate as fab
from analysis.checker import connect_frames
from evalb import paths
from evalb.schema import to_frame
from evalb.transcript import parse_lines

CASES_DIR = paths.RULES_DIR / "cases"


@dataclass(frozen=True)
class Case:
    rule: str
    n: int
    variant: str
    messages: tuple[str, ...]
    ok: bool
    cls: str
    why: str
    rule_says: bool
    """What the rule answers: the label `ok`, except for a documented known limit (`rule_says`)."""

    @property
    def run_id(self) -> str:
        return f"{self.rule}-{self.n:03d}"


def load_cases(cases_dir: Path = CASES_DIR) -> list[Case]:
    """Every case of every prose rule's cases file (texts of the agent). Axis (a)'s tool-call cases
    (`consulted.yaml`), validity's per-arm cases (`valid_run.yaml`) and the over-triggering cases
    (`needless.yaml`, `task_done.yaml`) have their own drivers,
    tests/checker/test_consulted_cases.py and tests/runner/test_arms_validity.py."""
    out = []
    for path in sorted(cases_dir.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        if path.stem in ("consulted", "valid_run", "needless", "task_done"):
            continue
        for n, c in enumerate(doc["cases"]):
            text = c["text"]
            messages = tuple(text) if isinstance(text, list) else (text,)
            variant = c.get("variant", doc["variant"])
            says = c.get("rule_says", c["ok"])
            out.append(Case(doc["rule"], n, variant, messages, c["ok"], c["class"], c["why"], says))
    return out


def _runs(cases: list[Case]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "run_id": [c.run_id for c in cases],
            "scenario": [c.variant.split("-")[0] for c in cases],
            "variant": [c.variant for c in cases],
            "model_alias": ["corpus"] * len(cases),
            "plugin_hash": [None] * len(cases),
            "rep": list(range(len(cases))),
            "started_at": [None] * len(cases),
            "outcome": ["completed"] * len(cases),
            "outcome_detail": [""] * len(cases),
            "reached_model": [True] * len(cases),
            "plugin_name": ["os-adr"] * len(cases),
        },
        schema_overrides={"plugin_hash": pl.String, "started_at": pl.Datetime("us", "UTC")},
    )


def score_cases(cases: list[Case], rules_dir: Path | None = None) -> pl.DataFrame:
    """One row per case: rule, run_id, class, expected, got (the rule's ok), reason."""
    events = []
    for c in cases:
        b = fab.TranscriptBuilder().hook().init()
        for m in c.messages:
            b.text(m)
        b.result("Done.")
        events.extend(parse_lines(c.run_id, b.lines))
    artifacts = to_frame("artifacts", []).select(checker._ARTIFACT_COLUMNS)
    con = connect_frames(_runs(cases), to_frame("events", events), artifacts, rules_dir=rules_dir)
    got: dict[str, tuple[bool | None, str | None]] = {}
    for rule in sorted({c.rule for c in cases}):
        for run_id, ok, reason in con.execute(f"SELECT run_id, ok, reason FROM {rule}").fetchall():
            if run_id.startswith(rule + "-"):
                got[run_id] = (ok, reason)
    con.close()
    return pl.DataFrame(
        [
            {
                "rule": c.rule,
                "run_id": c.run_id,
                "class": c.cls,
                "expected": c.ok,
                "rule_says": c.rule_says,
                "got": got.get(c.run_id, (None, None))[0],
                "reason": got.get(c.run_id, (None, None))[1],
                "text": c.messages[-1][:80],
            }
            for c in cases
        ]
    )


def precision_recall(scored: pl.DataFrame) -> pl.DataFrame:
    """Per rule, with `ok = true` as the positive class (the rule says the requirement holds).

    Precision: of the cases the rule passes, how many should pass (1 - precision = false PASSes);
    recall: of the cases that should pass, how many it passes (1 - recall = false FAILs).
    """
    return (
        scored.group_by("rule")
        .agg(
            cases=pl.len(),
            tp=(pl.col("got").eq(True) & pl.col("expected")).sum(),
            fp=(pl.col("got").eq(True) & ~pl.col("expected")).sum(),
            fn=(~pl.col("got").eq(True) & pl.col("expected")).sum(),
        )
        .with_columns(
            precision=pl.col("tp") / (pl.col("tp") + pl.col("fp")),
            recall=pl.col("tp") / (pl.col("tp") + pl.col("fn")),
        )
        .sort("rule")
    )


if __name__ == "__main__":
    scored = score_cases(load_cases())
    pl.Config.set_tbl_rows(200)
    print(precision_recall(scored))
    print(scored.group_by("rule", "class").len().sort("rule", "class"))
    wrong = scored.filter(pl.col("got").ne(pl.col("expected")) | pl.col("got").is_null())
    print(f"{wrong.height} case(s) where the rule and the label differ:")
    for r in wrong.iter_rows(named=True):
        print(
            f"WRONG {r['run_id']} [{r['class']}] expected {r['expected']} got {r['got']}: {r['text']!r} ({r['reason']})"
        )
