"""The labelled over-triggering cases (analysis/rules/cases/needless.yaml, task_done.yaml) through
the real checker: DuckDB rules, the tree-sitter shell facts, and the scripted judge in process.

needless.yaml: each case is an O1 run that does the task right plus one tool call, extra end-state
files and/or its own final message; the `needless` column must say exactly what the label says,
and a needless call must be the axis (a) evidence. task_done.yaml: end states of O1..O3 runs;
axis (b) must say `done` exactly as labelled.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from analysis import fabricate as fab
from analysis.rules import shell
from evalb.scenarios import resolve_variant
from runner.scripted.policies import judge_verdict
from tests.checker.helpers import Runs, hooked

CASES_DIR = Path(shell.__file__).parent / "cases"
NEEDLESS: list[dict] = yaml.safe_load((CASES_DIR / "needless.yaml").read_text(encoding="utf-8"))["cases"]
DONE: list[dict] = yaml.safe_load((CASES_DIR / "task_done.yaml").read_text(encoding="utf-8"))["cases"]
TOOL_SEQ = 5  # 0-2: hook_started, hook_response, init; 3-4: the Read of README.md and its result


class ScriptedJudge:
    """The scripted judge (the stand-in for haiku) answered in process instead of through the client."""

    name = "scripted"

    def ask(self, prompt: str) -> str:
        return judge_verdict(prompt)


def _files(specs: list[dict], variant: str) -> list[fab.SandboxFile]:
    sc, _ = resolve_variant(variant)
    ideal = fab.done_content(sc)
    half = (
        ideal.replace(sc.policy.edit_new or "", sc.policy.edit_old or "", 1)
        if sc.policy.replace_all
        else ideal
    )
    out = []
    for f in specs:
        content = {"IDEAL": ideal, "HALF": half}.get(f.get("content"), f.get("content"))  # type: ignore[arg-type]
        out.append(fab.SandboxFile(f["path"], f["change"], content, f.get("kind", "file")))
    return out


def needless_run(case: dict) -> tuple[list[str], list[fab.SandboxFile]]:
    sc, _ = resolve_variant("O1")
    b = hooked()
    b.read(sc.policy.touch_file, "# README\n")
    if "tool" in case:
        b.tool(case["tool"], case["input"], "ok")
    b.edit(sc.policy.touch_file)
    text = case.get("final", "Done: README.md is updated.")
    b.text(text).result(text)
    files = [fab.SandboxFile(sc.policy.touch_file, "modified", fab.done_content(sc))]
    return b.lines, files + _files(case.get("files", []), "O1")


@pytest.fixture(scope="module")
def scored(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    runs = Runs(tmp_path_factory.mktemp("needless-cases"))
    for case in NEEDLESS:
        lines, files = needless_run(case)
        runs.add(case["name"], lines, "O1", files=files)
    for case in DONE:
        made = fab.perfect(resolve_variant(case["variant"])[0], resolve_variant(case["variant"])[1], {})
        runs.add(case["name"], made.lines, case["variant"], files=_files(case["files"], case["variant"]))
    return runs.score(judge=ScriptedJudge())


@pytest.mark.parametrize("cases", [NEEDLESS, DONE], ids=["needless", "task_done"])
def test_the_files_are_real_corpora(cases: list[dict]) -> None:
    """Unique names, both labels, every case with a reason."""
    names = [c["name"] for c in cases]
    assert len(set(names)) == len(names) and len(names) >= 10
    label = "needless" if "needless" in cases[0] else "done"
    assert {c[label] for c in cases} == {True, False}
    assert all(c["why"].strip() for c in cases)


@pytest.mark.parametrize("case", NEEDLESS, ids=[c["name"] for c in NEEDLESS])
def test_needless_case(scored: dict[str, dict], case: dict) -> None:
    row = scored[case["name"]]
    assert row["valid"], row["reasons"]
    assert row["needless"] is case["needless"], f"{case['name']}: {case['why']} ({row['reasons']})"
    assert row["axis_a"] is (not case["needless"])
    assert row["axis_b"] is True, row["reasons"]  # the task itself was done in every case
    assert row["verdict"] == ("FAIL" if case["needless"] else "PASS")
    if case["needless"] and "tool" in case and case["class"] == "consult":
        assert row["evidence_a"] == [TOOL_SEQ], row["reasons"]
    if not case["needless"]:
        assert row["evidence_a"] == []


@pytest.mark.parametrize("case", DONE, ids=[c["name"] for c in DONE])
def test_task_done_case(scored: dict[str, dict], case: dict) -> None:
    row = scored[case["name"]]
    assert row["axis_b"] is case["done"], f"{case['name']}: {case['why']} ({row['reasons']})"
    assert row["needless"] is False and row["verdict"] == ("PASS" if case["done"] else "FAIL")


def test_unreadable_content_never_passes_an_absent_only_check(tmp_path: Path) -> None:
    """A done check with only absent patterns: a file whose content capture withheld is not done
    (an empty read would match no absent pattern and pass)."""
    import shutil

    from evalb import paths

    sdir = tmp_path / "scenarios"
    sdir.mkdir()
    shutil.copy(paths.SCENARIOS_DIR / "O1.md", sdir / "O1.md")
    (sdir / "O8.md").write_text(
        "---\nid: O8\nkind: overtrigger\ntitle: t\ndone:\n  - path: README.md\n    absent: ['recieve']\n"
        "policy:\n  touch_file: README.md\n  edit_old: recieves\n  edit_new: receives\n---\n\n## Task\n\nheld out\n"
    )
    runs = Runs(tmp_path / "archive")
    lines = hooked().text("Done.").result("Done.").lines
    runs.add("unread", lines, "O8", files=[fab.SandboxFile("README.md", "modified", None)])
    runs.add("read", lines, "O8", files=[fab.SandboxFile("README.md", "modified", "receives\n")])
    got = runs.score(judge=ScriptedJudge(), scenarios_dir=sdir)
    assert got["unread"]["axis_b"] is False and "not captured" in got["unread"]["reasons"]
    assert got["read"]["axis_b"] is True and got["read"]["verdict"] == "PASS"


def test_task_evidence_is_the_write_not_a_mention(tmp_path: Path) -> None:
    """Axis (b)'s evidence is the call that wrote the file (Edit, or a Bash write such as sed -i),
    never a call that only names it (an adr-search on the file's name)."""
    sc, _ = resolve_variant("O1")
    files = [fab.SandboxFile("README.md", "modified", fab.done_content(sc))]
    runs = Runs(tmp_path / "archive")
    b = hooked()  # seq 3-4: search naming the file; 5-6: sed -i writing it
    b.bash("/opt/plugins/os-adr/bin/adr-search --topic README.md", "none")
    b.bash("sed -i 's/recieves/receives/' README.md", "")
    runs.add("sed", b.text("Done.").result("Done.").lines, "O1", files=files)
    got = runs.score(judge=ScriptedJudge())["sed"]
    assert got["evidence_b"] == [5] and got["evidence_a"] == [3]
    assert (got["needless"], got["axis_b"], got["verdict"]) == (True, True, "FAIL")
