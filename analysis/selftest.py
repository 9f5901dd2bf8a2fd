"""The model-free harness self-test, both directions for every variant plus negative controls.

Every case is a fabricated transcript (analysis.fabricate) committed to a temporary archive and
scored by the very queries real runs go through (analysis.checker.score_archive). Task blocks are
never read: `Scenario.task_prompt` is made to raise for the whole self-test. The judge is the
built-in keyword judge, so no model is ever called.

"Both directions" per variant: the ideal agent's transcript must give the variant's expected
verdict and the untouched/oblivious ones must FAIL. For a degradation variant (expect_b: fail,
e.g. R4-nograph) the ideal agent *without the missing capability* consults the ADRs but cannot
reach the decision, so it must give A PASS, B FAIL; and the base scenario's ideal transcript,
scored under the degradation variant, must PASS, which shows its B FAIL is not hard-wired.

Prose controls (`fabricate.prose_controls`), per R scenario and both directions: for every class
of false PASS the prose rules guard against (negated conflict, supersession as history, negated
or unrelated qualifier on the distractor, reversed/negated/asked/hedged content, false citations,
questions, code blocks, quoted hook notes, non-English punctuation, long messages) a text that must
FAIL axis (b), for the rule named in its reasons, and its near-twin that must PASS.

Over-triggering (O) scenarios: the ideal agent does the task and never touches the ADR system
(A PASS = not needless, B PASS = task done); untouched/oblivious ones do not do the task (A PASS,
B FAIL). Controls (`fabricate.overtrigger_controls`), both directions, all doing the task right:
ritual consultation in every form axis (a) knows (Bash, Read, Grep, Skill, CLI, a sub-agent), an
ADR written by a script, the ADR index edited, an ADR offered in prose (the judge) -> needless;
looking around without touching docs/adr, declining an ADR or naming docs/adr in prose -> not
needless. A symlinked or gutted file must FAIL axis (b). Each case also checks the `needless` column.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from analysis import fabricate as fab
from analysis.checker import score_archive
from analysis.judge import KeywordJudge
from evalb.archive import Archive
from evalb.scenarios import Scenario, load_scenarios


@dataclass
class Case:
    """One fabricated run and what the checker must say about it (None = not asserted)."""

    name: str
    variant: str
    scenario: str
    made: fab.Fabricated
    expect_a: str | None
    expect_b: str | None
    expect_verdict: str
    must_say: str | None = None
    """A phrase the reasons must contain (e.g. that W's axis (b) came from the new ADR, not the judge)."""
    expect_needless: bool | None = None
    """O scenarios: the `needless` column (None = not asserted; W/R runs must have it null)."""
    run_id: str = ""


@contextlib.contextmanager
def task_blocks_forbidden() -> Iterator[None]:
    """Make any attempt to read a held-out Task block fail loudly while the self-test runs."""

    def refuse(self: Scenario) -> str:
        raise RuntimeError(f"the self-test must never read the Task block of {self.id}")

    original = Scenario.task_prompt
    Scenario.task_prompt = refuse  # type: ignore[method-assign]
    try:
        yield
    finally:
        Scenario.task_prompt = original  # type: ignore[method-assign]


def build_cases(scenarios: list[Scenario], adrs: dict[str, tuple[str, str]]) -> list[Case]:
    """Both directions for every variant, then the negative controls."""
    cases: list[Case] = []
    for sc in scenarios:
        if sc.kind.value == "overtrigger":
            cases.extend(overtrigger_cases(sc, adrs))
            continue
        base = sc.all_variants()[0]
        for v in sc.all_variants():
            good = "PASS" if v.expect_b == "pass" else "FAIL"
            must = "new ADR docs/adr/" if sc.kind.value == "write" else None
            cases.append(Case("perfect", v.id, sc.id, fab.perfect(sc, v, adrs), "PASS", good, good, must))
            cases.append(Case("untouched", v.id, sc.id, fab.untouched(sc), "FAIL", "FAIL", "FAIL"))
            cases.append(Case("oblivious", v.id, sc.id, fab.oblivious(sc), "FAIL", "FAIL", "FAIL"))
            if v.expect_b == "fail":
                made = fab.perfect(sc, base, adrs)
                cases.append(Case(f"{base.id}-perfect", v.id, sc.id, made, "PASS", "PASS", "PASS"))
        if sc.kind.value == "write":
            cases.append(
                Case(
                    "proposes-in-prose",
                    sc.id,
                    sc.id,
                    fab.proposes_in_prose(sc),
                    "PASS",
                    "PASS",
                    "PASS",
                    "judge YES",
                )
            )
        else:
            cases.append(Case("prose-only", sc.id, sc.id, fab.prose_only(sc, adrs), "FAIL", None, "FAIL"))
            if sc.distractors:
                made = fab.live_distractor(sc, adrs)
                cases.append(Case("distractor-live", sc.id, sc.id, made, "PASS", "FAIL", "FAIL", "as live"))
            if sc.match == "content":
                made = fab.wrong_content(sc, adrs)
                cases.append(Case("wrong-content", sc.id, sc.id, made, "PASS", "FAIL", "FAIL"))
            for name, must_pass, made, say in fab.prose_controls(sc, adrs):
                want = "PASS" if must_pass else "FAIL"
                cases.append(Case(name, sc.id, sc.id, made, "PASS", want, want, say))
        cases.append(
            Case("no-hook", sc.id, sc.id, fab.no_hook(sc, base, adrs), None, None, "INVALID", "INVALID: no")
        )
        cases.extend(mention_and_hook_controls(sc, adrs))
    return cases


def overtrigger_cases(sc: Scenario, adrs: dict[str, tuple[str, str]]) -> list[Case]:
    """O: both directions (ideal vs untouched/oblivious/symlinked/gutted) and the needless controls."""
    o = sc.id
    cases = [
        Case(
            "perfect",
            o,
            o,
            fab.perfect(sc, sc.all_variants()[0], adrs),
            "PASS",
            "PASS",
            "PASS",
            "task done",
            False,
        ),
        Case(
            "untouched", o, o, fab.untouched(sc), "PASS", "FAIL", "FAIL", "was not added or modified", False
        ),
        Case("oblivious", o, o, fab.oblivious(sc), "PASS", "FAIL", "FAIL", "task not done", False),
        Case(
            "symlinked", o, o, fab.overtrigger_symlink(sc), "PASS", "FAIL", "FAIL", "as a regular file", False
        ),
        Case("gutted", o, o, fab.overtrigger_gutted(sc), "PASS", "FAIL", "FAIL", "lacks", False),
    ]
    for name, needless, made, say in fab.overtrigger_controls(sc):
        a, verdict = ("FAIL", "FAIL") if needless else ("PASS", "PASS")
        cases.append(Case(name, o, o, made, a, "PASS", verdict, say, needless))
    cases.append(
        Case(
            "no-hook", o, o, fab.no_hook(sc, sc.all_variants()[0], adrs), None, None, "INVALID", "INVALID: no"
        )
    )
    cases.extend(mention_and_hook_controls(sc, adrs))
    return cases


# --- controls for axis (a) by mention and for the plugin's own hook note ----------------------------
FOREIGN_NOTE = "[superpowers] You have superpowers. Read the skills list before you start."
#: Bash calls that name docs/adr without reading, listing, searching or writing it.
MENTIONS = (
    'echo "I should look at docs/adr later"',
    'git commit -qam "Respect docs/adr/0002 and docs/adr/0003"',
    "cat > NOTES.md <<'EOF'\nSee docs/adr/ before changing behaviour.\nEOF",
    'grep -rn "docs/adr" lib/',
)
#: Bash calls that do read it, from inside a pipeline and a `bash -c` string.
READS = ("cat docs/adr/{f} | head -40", "bash -c 'ls docs/adr'")


def _foreign_hook(lines: list[str], keep_own: bool) -> list[str]:
    """The session with another plugin's SessionStart note: instead of ours, or before ours."""
    foreign = fab.TranscriptBuilder().hook(FOREIGN_NOTE).lines
    if keep_own:
        return foreign + lines
    own = [ln for ln in lines if '"subtype":"hook_' in ln]
    return foreign + [ln for ln in lines if ln not in own]


def _is_answer(line: str) -> bool:
    """An assistant text line or the result line (the words of the answer, no tool call)."""
    obj = json.loads(line)
    if obj.get("type") == "result":
        return True
    content = (obj.get("message") or {}).get("content") or []
    return obj.get("type") == "assistant" and all(c.get("type") == "text" for c in content)


def mention_and_hook_controls(sc: Scenario, adrs: dict[str, tuple[str, str]]) -> list[Case]:
    """Both directions: a foreign plugin's hook note alone -> INVALID, beside ours -> scored as perfect;
    (R) Bash that only mentions docs/adr -> A FAIL, Bash that reads it in a pipeline/`bash -c` -> A PASS."""
    base = sc.all_variants()[0]
    good = "PASS" if base.expect_b == "pass" else "FAIL"
    made = fab.perfect(sc, base, adrs)
    out = [
        Case(
            "foreign-hook",
            sc.id,
            sc.id,
            fab.Fabricated(_foreign_hook(made.lines, False), made.files),
            None,
            None,
            "INVALID",
            "no SessionStart hook note from the plugin ([os-adr] marker)",
        ),
        Case(
            "foreign-and-own-hook",
            sc.id,
            sc.id,
            fab.Fabricated(_foreign_hook(made.lines, True), made.files),
            "PASS",
            good,
            good,
        ),
    ]
    if sc.kind.value == "write" or not sc.correct_adr:
        return out
    fname = adrs[sc.correct_adr][0]
    answer = [ln for ln in fab.prose_only(sc, adrs).lines if _is_answer(ln)]
    for name, commands, a in (("a-by-mention", MENTIONS, "FAIL"), ("a-by-pipeline-read", READS, "PASS")):
        b = fab.TranscriptBuilder().hook().init()
        for cmd in commands:
            b.bash(cmd.format(f=fname), "ok")
        lines = b.lines + answer
        verdict = "FAIL" if a == "FAIL" else good
        out.append(Case(name, sc.id, sc.id, fab.Fabricated(lines, []), a, good, verdict))
    return out


def sc_kind(case: Case, scenarios: list[Scenario]) -> str:
    """The kind of the scenario a case belongs to."""
    return next(sc.kind.value for sc in scenarios if sc.id == case.scenario)


def _ab(v: bool | None) -> str:
    return "-" if v is None else ("PASS" if v else "FAIL")


def run_selftest(
    workdir: Path, *, scenarios_dir: Path | None = None, adr_dir: Path | None = None
) -> pl.DataFrame:
    """Fabricate, archive and score every case under `workdir`; one row per case with `ok`."""
    with task_blocks_forbidden():
        scenarios = load_scenarios(scenarios_dir)
        cases = build_cases(scenarios, fab.load_adrs(adr_dir))
        archive = Archive.create_or_open(workdir / "archive")
        for i, c in enumerate(cases):
            c.run_id = fab.archive_transcript(
                archive,
                c.made.lines,
                variant=c.variant,
                scenario=c.scenario,
                model_alias=c.name,
                rep=i,
                files=c.made.files,
            )
        scored = score_archive(archive, judge=KeywordJudge(), scenarios_dir=scenarios_dir)
    by_run = {r["run_id"]: r for r in scored.scores.iter_rows(named=True)}
    rows = []
    for c in cases:
        s = by_run[c.run_id]
        got = (_ab(s["axis_a"]), _ab(s["axis_b"]), s["verdict"])
        want = (c.expect_a, c.expect_b, c.expect_verdict)
        ok = all(w is None or w == g for w, g in zip(want, got, strict=True))
        ok = ok and (c.must_say is None or c.must_say in s["reasons"])
        if c.expect_needless is not None or sc_kind(c, scenarios) != "overtrigger":
            ok = ok and s["needless"] == c.expect_needless
        elif s["valid"]:
            ok = ok and s["needless"] is not None
        rows.append(
            {
                "variant": c.variant,
                "case": c.name,
                "expect": "/".join(w or "*" for w in want),
                "got": "/".join(got),
                "ok": ok,
                "reasons": s["reasons"],
            }
        )
    return pl.DataFrame(rows)
