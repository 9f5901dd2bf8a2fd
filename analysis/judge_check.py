"""`evalb judge-check`: how well does a judge agree with the rubric on a labelled set of W messages?

Every labelled final message (analysis/judge_cases.yaml by default) is put to the judge `repeat`
times through the same fenced prompt the checker uses. Reported: the confusion matrix (ERROR, an
answer that is neither YES nor NO, in its own column), accuracy, Cohen's κ with a 95 % interval,
self-consistency, and the errors per class. The judge passes when the interval's lower bound
reaches `min_kappa` and self-consistency reaches `min_consistency`.

κ = (p_o − p_e) / (1 − p_e) over all answers; an ERROR always disagrees with the label and adds
nothing to p_e. Its interval is the Wilson score interval of the per-case agreement (n = number of
cases; with repeats, each case's share of agreeing answers, which makes the interval conservative),
mapped through the κ formula with p_e held at its estimate. Unlike a bootstrap or the asymptotic
SE, it does not collapse to a point when every answer agrees, so a perfect score on a handful of
cases cannot pass: a perfect judge needs about 35 balanced cases to clear a lower bound of 0.8.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import subprocess
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from analysis import judge as judging
from evalb.errors import UsageError

DEFAULT_CASES = Path(__file__).with_name("judge_cases.yaml")
MIN_KAPPA = 0.8
MIN_CONSISTENCY = 0.95
LABELS = ("YES", "NO")
ANSWERS = ("YES", "NO", "ERROR")
_Z = 1.959964
SHOWN = 15  # wrong cases listed in the text report


@dataclass(frozen=True)
class Case:
    """One labelled final message."""

    id: str
    cls: str
    expected: str
    message: str
    why: str


def load_cases(path: Path) -> tuple[list[Case], str]:
    """The labelled cases in `path` and the file's content hash; UsageError naming the bad item."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) else "not UTF-8 text"
        raise UsageError(f"cannot read the cases file {path}: {reason}", hint="pass --cases FILE") from e
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        line = f" (line {where.line + 1})" if where else ""
        raise UsageError(f"the cases file {path} is not valid YAML{line}") from e
    items = data.get("cases") if isinstance(data, dict) else None
    if not isinstance(items, list) or not items:
        raise UsageError(f"the cases file {path} has no `cases:` list", hint="see analysis/judge_cases.yaml")
    cases: list[Case] = []
    for i, item in enumerate(items, 1):
        cases.append(_case(path, i, item))
    ids = Counter(c.id for c in cases)
    if dupes := sorted(k for k, n in ids.items() if n > 1):
        raise UsageError(f"the cases file {path} repeats the id {dupes[0]!r}", hint="ids must be unique")
    for label in LABELS:
        if not any(c.expected == label for c in cases):
            raise UsageError(
                f"the cases file {path} has no case expecting {label}", hint="κ needs both YES and NO cases"
            )
    return cases, hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _case(path: Path, i: int, item: object) -> Case:
    where = f"the cases file {path}, case {i}"
    if not isinstance(item, dict):
        raise UsageError(
            f"{where} is not a mapping", hint="each case needs id, class, expected, why, message"
        )
    missing = [k for k in ("id", "class", "expected", "why", "message") if not isinstance(item.get(k), str)]
    if missing:
        raise UsageError(
            f"{where} lacks a text field {missing[0]!r}", hint='quote YES and NO: expected: "YES"'
        )
    if item["expected"] not in LABELS:
        raise UsageError(f"{where}: expected must be YES or NO, not {item['expected']!r}")
    if not item["message"].strip():
        raise UsageError(f"{where}: the message is empty")
    return Case(item["id"], item["class"], item["expected"], item["message"], item["why"])


@dataclass
class CaseResult:
    """The judge's answers to one case (YES / NO / ERROR) and its raw outputs."""

    case: Case
    answers: list[str]
    raw: list[str]

    @property
    def agreement(self) -> float:
        return sum(a == self.case.expected for a in self.answers) / len(self.answers)

    @property
    def consistent(self) -> bool:
        return len(set(self.answers)) == 1 and self.answers[0] != "ERROR"


@dataclass
class CheckResult:
    """A judge-check: the answers and the figures derived from them."""

    judge: str
    rubric_hash: str
    cases_file: str
    cases_hash: str
    repeat: int
    results: list[CaseResult]
    min_kappa: float = MIN_KAPPA
    min_consistency: float = MIN_CONSISTENCY
    checked_at: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))

    def answers(self) -> list[tuple[str, str]]:
        """(expected, answer) for every answer given."""
        return [(r.case.expected, a) for r in self.results for a in r.answers]

    def matrix(self) -> dict[str, dict[str, int]]:
        counts = Counter(self.answers())
        return {e: {a: counts[(e, a)] for a in ANSWERS} for e in LABELS}

    def accuracy(self) -> float:
        pairs = self.answers()
        return sum(e == a for e, a in pairs) / len(pairs)

    def _p_e(self) -> float:
        pairs = self.answers()
        n = len(pairs)
        exp, ans = Counter(e for e, _ in pairs), Counter(a for _, a in pairs)
        return sum(exp[k] * ans[k] for k in LABELS) / (n * n)

    def kappa(self) -> float:
        p_e = self._p_e()
        return (self.accuracy() - p_e) / (1 - p_e)

    def kappa_interval(self) -> tuple[float, float]:
        """95 % interval: Wilson on the per-case agreement (n = cases), mapped through κ at fixed p_e."""
        n = len(self.results)
        p = sum(r.agreement for r in self.results) / n
        centre = (p + _Z**2 / (2 * n)) / (1 + _Z**2 / n)
        half = _Z * math.sqrt(p * (1 - p) / n + _Z**2 / (4 * n * n)) / (1 + _Z**2 / n)
        p_e = self._p_e()

        def to_kappa(b: float) -> float:
            return max(-1.0, min(1.0, (b - p_e) / (1 - p_e)))

        return to_kappa(centre - half), to_kappa(centre + half)

    def consistency(self) -> float | None:
        """Share of cases answered the same (and not ERROR) every time; None with one answer each."""
        if self.repeat < 2:
            return None
        return sum(r.consistent for r in self.results) / len(self.results)

    def errors(self) -> int:
        return sum(a == "ERROR" for r in self.results for a in r.answers)

    def per_class(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for r in self.results:
            c = out.setdefault(r.case.cls, {"cases": 0, "answers": 0, "wrong": 0, "wrong_ids": []})
            wrong = sum(a != r.case.expected for a in r.answers)
            c["cases"] += 1
            c["answers"] += len(r.answers)
            c["wrong"] += wrong
            if wrong:
                c["wrong_ids"].append(r.case.id)
        return out

    def shortfalls(self) -> list[str]:
        """Why the judge fails the thresholds (empty: it passes)."""
        out = []
        low = self.kappa_interval()[0]
        if low < self.min_kappa:
            out.append(f"κ lower bound {low:.3f} < {self.min_kappa:.2f}")
        cons = self.consistency()
        if cons is None and self.min_consistency > 0:
            out.append("self-consistency not measured (--repeat 1; pass --min-consistency 0 to waive)")
        elif cons is not None and cons < self.min_consistency:
            out.append(f"self-consistency {cons:.3f} < {self.min_consistency:.2f}")
        return out

    def passed(self) -> bool:
        return not self.shortfalls()

    def to_json(self) -> dict[str, Any]:
        low, high = self.kappa_interval()
        return {
            "judge": self.judge,
            "rubric_hash": self.rubric_hash,
            "cases_file": self.cases_file,
            "cases_hash": self.cases_hash,
            "repeat": self.repeat,
            "checked_at": self.checked_at.isoformat(),
            "n_cases": len(self.results),
            "matrix": self.matrix(),
            "accuracy": self.accuracy(),
            "kappa": self.kappa(),
            "kappa_ci95": [low, high],
            "kappa_ci_method": "wilson-per-case-agreement",
            "self_consistency": self.consistency(),
            "errors": self.errors(),
            "per_class": self.per_class(),
            "thresholds": {"min_kappa_lower": self.min_kappa, "min_consistency": self.min_consistency},
            "passed": self.passed(),
            "shortfalls": self.shortfalls(),
            "cases": [
                {
                    "id": r.case.id,
                    "class": r.case.cls,
                    "expected": r.case.expected,
                    "answers": r.answers,
                    "raw": [x[:500] for x in r.raw],
                }
                for r in self.results
            ],
        }


def _ask(judge: judging.Judge, rubric: str, message: str) -> tuple[str, str]:
    """(answer, raw output) for one message; a failing call is an ERROR with the failure as raw."""
    try:
        raw = judge.ask(judging.build_prompt(rubric, message))
    except (OSError, subprocess.SubprocessError) as e:
        return "ERROR", f"judge failed: {e}"
    return judging.parse_answer(raw), raw


def run_check(
    judge: judging.Judge,
    cases: list[Case],
    *,
    repeat: int = 2,
    jobs: int = 4,
    rubric_path: Path | None = None,
    cases_file: str = "",
    cases_hash: str = "",
    min_kappa: float = MIN_KAPPA,
    min_consistency: float = MIN_CONSISTENCY,
) -> CheckResult:
    """Ask `judge` every case `repeat` times, `jobs` at a time.

    The first question is asked alone: when the judge cannot answer it at all (its process fails,
    e.g. no credentials), this raises UsageError at once instead of failing every case."""
    if repeat < 1 or jobs < 1:
        raise UsageError("--repeat and --jobs must be at least 1")
    rubric = judging.rubric_text(rubric_path)
    try:
        first = judge.ask(judging.build_prompt(rubric, cases[0].message))
    except (OSError, subprocess.SubprocessError) as e:
        raise UsageError(
            f"the judge {judge.name} failed on the first case: {e}",
            hint="check its credentials (claude needs a login or ANTHROPIC_API_KEY) or pass --judge CMD",
        ) from e
    slots = [(i, k) for i in range(len(cases)) for k in range(repeat)][1:]
    with ThreadPoolExecutor(max_workers=min(jobs, max(1, len(slots)))) as pool:
        rest = list(pool.map(lambda s: _ask(judge, rubric, cases[s[0]].message), slots))
    got: dict[int, list[tuple[str, str]]] = {0: [(judging.parse_answer(first), first)]}
    for (i, _), answer in zip(slots, rest, strict=True):
        got.setdefault(i, []).append(answer)
    results = [CaseResult(c, [a for a, _ in got[i]], [raw for _, raw in got[i]]) for i, c in enumerate(cases)]
    return CheckResult(
        judge=judge.name,
        rubric_hash=judging.rubric_hash(rubric_path),
        cases_file=cases_file,
        cases_hash=cases_hash,
        repeat=repeat,
        results=results,
        min_kappa=min_kappa,
        min_consistency=min_consistency,
    )


def report_text(res: CheckResult) -> str:
    """The human-readable report."""
    n_yes = sum(r.case.expected == "YES" for r in res.results)
    m = res.matrix()
    low, high = res.kappa_interval()
    total = len(res.answers())
    cons = res.consistency()
    lines = [
        f"judge:  {res.judge}",
        f"rubric: {res.rubric_hash}   cases: {res.cases_file} ({len(res.results)} cases: "
        f"{n_yes} YES, {len(res.results) - n_yes} NO; hash {res.cases_hash}), {res.repeat} answer(s) each",
        "",
        f"{'':14}{'answered YES':>14}{'answered NO':>13}{'ERROR':>7}",
        *(f"{'expected ' + e:14}{m[e]['YES']:>14}{m[e]['NO']:>13}{m[e]['ERROR']:>7}" for e in LABELS),
        "",
        f"accuracy          {res.accuracy():.3f}  ({sum(e == a for e, a in res.answers())} of {total} answers)",
        f"Cohen's kappa     {res.kappa():.3f}  95% interval [{low:.3f}, {high:.3f}] "
        f"(Wilson on per-case agreement, n = {len(res.results)} cases)",
        "self-consistency  "
        + (
            f"{cons:.3f}  ({sum(r.consistent for r in res.results)} of {len(res.results)} cases "
            "answered the same every time)"
            if cons is not None
            else "not measured (one answer per case)"
        ),
        f"ERROR answers     {res.errors()} of {total}",
        "",
        "per class (wrong answers / answers):",
    ]
    for cls, c in sorted(res.per_class().items()):
        ids = f"  {', '.join(c['wrong_ids'])}" if c["wrong_ids"] else ""
        lines.append(f"  {cls:12} {c['wrong']:>3} / {c['answers']}{ids}".rstrip())
    wrong = [r for r in res.results if any(a != r.case.expected for a in r.answers)]
    if wrong:
        more = f" (first {SHOWN} of {len(wrong)}; all in --json)" if len(wrong) > SHOWN else ""
        lines += ["", f"wrong answers{more}:"]
        for r in wrong[:SHOWN]:
            shown = "; ".join(
                " ".join(x.split())[:80] for x, a in zip(r.raw, r.answers, strict=True) if a == "ERROR"
            )
            lines.append(
                f"  {r.case.id} ({r.case.cls}): expected {r.case.expected}, got {'/'.join(r.answers)}"
                + (f"  [ERROR output: {shown}]" if shown else "")
            )
    short = res.shortfalls()
    lines += [
        "",
        f"thresholds: κ lower bound >= {res.min_kappa:.2f}, self-consistency >= {res.min_consistency:.2f}",
        "verdict: PASS" if not short else f"verdict: FAIL ({'; '.join(short)})",
    ]
    return "\n".join(lines) + "\n"


def write_json(res: CheckResult, path: Path) -> None:
    """The full result (figures, thresholds, every answer) as JSON."""
    try:
        path.write_text(json.dumps(res.to_json(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror}", hint="pass --json to a writable path") from e
