"""Each rule on its own: transcripts that must pass it and transcripts that must fail it."""

from __future__ import annotations

import json

import polars as pl
import pytest

from analysis import fabricate as fab
from tests.checker.helpers import Runs, hooked

# (name, tool, input, consulted?) — the axis (a) corpus, also used by the SQL-vs-Polars test.
CONSULT_CASES: list[tuple[str, str, dict, bool]] = [
    ("skill", "Skill", {"skill": "os-adr:adr-search", "args": "retry"}, True),
    ("other-skill", "Skill", {"skill": "simplify"}, False),
    ("slash-command", "SlashCommand", {"command": "/os-adr:adr-new Title"}, True),
    ("cli-by-path", "Bash", {"command": '/opt/plugins/os-adr/bin/adr-new "Use SQLite"'}, True),
    ("cli-relative-path", "Bash", {"command": "./bin/adr-search --topic retry"}, True),
    ("cli-bare", "Bash", {"command": "adr-search --file lib/relay/delivery.rb"}, True),
    ("cli-after-and", "Bash", {"command": "cd /tmp/sb && adr-search --topic x"}, True),
    ("cli-with-env", "Bash", {"command": "FOO=1 adr-list"}, True),
    ("cli-in-subshell", "Bash", {"command": "echo $(adr-search --topic x)"}, True),
    ("which-cli", "Bash", {"command": "which adr-search"}, False),
    ("ls-adr", "Bash", {"command": "ls docs/adr"}, True),
    ("cat-adr-abs", "Bash", {"command": "cat /tmp/sandbox/docs/adr/0002-x.md"}, True),
    ("grep-adr", "Bash", {"command": "grep -rn retry docs/adr/"}, True),
    ("grep-recursive-docs", "Bash", {"command": "grep -rn retry docs/"}, True),
    ("rg-docs", "Bash", {"command": "rg retry docs"}, True),
    ("find-docs", "Bash", {"command": "find docs -name '*.md'"}, True),
    ("grep-project-wide", "Bash", {"command": "grep -rn retry ."}, False),
    ("grep-nonrecursive-docs", "Bash", {"command": "grep retry docs/README.md"}, False),
    ("ls-docs-only", "Bash", {"command": "ls docs"}, False),
    ("adr-system-dir", "Bash", {"command": "cat docs/adr-system/04.md"}, False),
    ("mydocs", "Bash", {"command": "ls mydocs/adr"}, False),
    ("description-only", "Bash", {"command": "ls lib", "description": "then look at docs/adr"}, False),
    ("read-adr", "Read", {"file_path": "/tmp/sb/docs/adr/0005-utc.md"}, True),
    ("read-code", "Read", {"file_path": "/tmp/sb/lib/relay/delivery.rb"}, False),
    ("write-adr", "Write", {"file_path": "docs/adr/0007-x.md", "content": "x"}, True),
    ("edit-adr", "Edit", {"file_path": "docs/adr/README.md", "old_string": "a", "new_string": "b"}, True),
    ("notebook", "NotebookEdit", {"notebook_path": "docs/adr/n.ipynb", "new_source": ""}, True),
    ("grep-tool-adr", "Grep", {"pattern": "retry", "path": "docs/adr"}, True),
    ("grep-tool-docs", "Grep", {"pattern": "retry", "path": "docs"}, True),
    ("grep-tool-root", "Grep", {"pattern": "docs/adr is where"}, False),
    ("glob-adr", "Glob", {"pattern": "docs/adr/*.md"}, True),
    ("glob-docs-recursive", "Glob", {"pattern": "docs/**/*.md"}, True),
    ("glob-all", "Glob", {"pattern": "**/*.rb"}, False),
    ("task-prompt", "Task", {"prompt": "Read docs/adr and run adr-search", "description": "x"}, False),
]


def consult_lines(tool: str, tool_input: dict) -> list[str]:
    b = hooked()
    b.tool(tool, tool_input, "ok")
    b.text("Done.").result("Done.")
    return b.lines


@pytest.fixture(scope="module")
def consult_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Runs, dict[str, dict]]:
    runs = Runs(tmp_path_factory.mktemp("consult"))
    for name, tool, tool_input, _ in CONSULT_CASES:
        runs.add(name, consult_lines(tool, tool_input))
    prose = hooked()
    prose.text("I will read docs/adr/0002-x.md and run bin/adr-search; os-adr:adr-search too.")
    prose.result("docs/adr/0002 says keep signing.")
    runs.add("prose", prose.lines)
    sub = hooked()
    tid = sub.task("check decisions")
    sub.bash("ls docs/adr", "0002-x.md", parent=tid)
    sub.task_done(tid, "found 0002")
    sub.result("ok")
    runs.add("subagent", sub.lines)
    return runs, runs.rule("consulted")


class TestConsulted:
    @pytest.mark.parametrize(
        ("name", "tool", "tool_input", "expected"), CONSULT_CASES, ids=[c[0] for c in CONSULT_CASES]
    )
    def test_tool_call(self, consult_runs, name, tool, tool_input, expected) -> None:
        """Each tool input from the corpus counts as consultation exactly when the rule says so."""
        row = consult_runs[1][name]
        assert row["ok"] is expected, (tool, json.dumps(tool_input), row["reason"])
        assert (row["evidence"] == [3]) is expected  # seq 0-2: hook_started, hook_response, init

    def test_prose_never_counts(self, consult_runs) -> None:
        """Text naming docs/adr, a CLI and a skill, plus the hook note, is not consultation."""
        assert consult_runs[1]["prose"]["ok"] is False

    def test_subagent_call_counts(self, consult_runs) -> None:
        """A sub-agent's tool call (parent_tool_use_id set) counts like the main agent's."""
        row = consult_runs[1]["subagent"]
        assert row["ok"] is True and row["evidence"] == [4]  # 3 is the Task call


CITE_CASES = [
    ("ADR-0002 forbids it", True),
    ("ADR 0002 forbids it", True),
    ("adr0002 forbids it", True),
    ("ADR-2 forbids it", True),
    ("ADR #2 forbids it", True),
    ("see docs/adr/0002-sign-every-relayed-webhook.md", True),
    ("decision 0002.", True),
    ("(0002)", True),
    ("ticket 10002 is open", False),
    ("version 2.0002 shipped", False),
    ("took 0002.5 seconds", False),
    ("ADR-20 and ADR-0020", False),
    ("id x0002y", False),
    ("ADR-0003 applies", False),
]


@pytest.fixture(scope="module")
def cite_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    runs = Runs(tmp_path_factory.mktemp("cite"))
    for i, (text, _) in enumerate(CITE_CASES):
        b = hooked()
        b.text(text).result("ok")
        runs.add(f"c{i}", b.lines, "R1")
    tool_only = hooked()
    tool_only.tool("Read", {"file_path": "docs/adr/0002-x.md"}, "ADR-0002: sign everything")
    tool_only.text("Done.").result("Done.")
    runs.add("tool-result", tool_only.lines, "R1")
    return runs.rule("cites_correct")


class TestCitesCorrect:
    @pytest.mark.parametrize(
        ("i", "text", "expected"),
        [(i, t, e) for i, (t, e) in enumerate(CITE_CASES)],
        ids=[t for t, _ in CITE_CASES],
    )
    def test_citation_forms(self, cite_runs, i, text, expected) -> None:
        """R1's ADR 0002 is recognised in its usual spellings and not inside other numbers."""
        assert cite_runs[f"c{i}"]["ok"] is expected, text

    def test_tool_result_is_not_a_citation(self, cite_runs) -> None:
        """The ADR's id appearing only in a tool result (what a file contained) is not the agent citing it."""
        assert cite_runs["tool-result"]["ok"] is False


DISTRACTOR_CASES = [
    ("ADR-0001 was superseded by ADR-0003, which requires backoff.", True),
    ("The old ADR-0001 (superseded) fixed the interval; ADR-0003 is in force.", True),
    ("ADR-0003 replaced ADR-0001.", True),
    ("ADR-0001 is obsolete. ADR-0003 applies.", True),
    ("Per ADR-0001 we retry every 30 seconds. ADR-0003 agrees.", False),
    ("ADR-0003 is superseded by nothing. ADR-0001 requires a fixed interval.", False),
    ("Following docs/adr/0001-retry-fixed.md, I kept 30 s.\nADR-0003 too.", False),
]


class TestNoLiveDistractor:
    @pytest.fixture(scope="class")
    @classmethod
    def rows(cls, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
        runs = Runs(tmp_path_factory.mktemp("distractor"))
        for i, (text, _) in enumerate(DISTRACTOR_CASES):
            b = hooked()
            b.text(text).result("ok")
            runs.add(f"d{i}", b.lines, "R2")
        b = hooked()
        b.text("Per ADR-0001 we retry every 30 seconds.").result("ok")
        runs.add("r1-no-distractors", b.lines, "R1")
        return runs.rule("no_live_distractor")

    @pytest.mark.parametrize(
        ("i", "text", "ok"),
        [(i, t, o) for i, (t, o) in enumerate(DISTRACTOR_CASES)],
        ids=[t[:40] for t, _ in DISTRACTOR_CASES],
    )
    def test_both_directions(self, rows, i, text, ok) -> None:
        """Naming 0001 as superseded passes; a sentence relying on 0001 unqualified fails."""
        assert rows[f"d{i}"]["ok"] is ok, text
        if not ok:
            assert rows[f"d{i}"]["evidence"] and "0001" in rows[f"d{i}"]["reason"]

    def test_not_applied_without_distractors(self, rows) -> None:
        """A scenario without distractors gets no row (the verdict treats it as not applicable)."""
        assert rows["r1-no-distractors"] == {}


class TestStatesContentAndConflict:
    @pytest.fixture(scope="class")
    @classmethod
    def runs(cls, tmp_path_factory: pytest.TempPathFactory) -> Runs:
        runs = Runs(tmp_path_factory.mktemp("content"))
        for name, text, variant in [
            ("both", "Timestamps are UTC; format them as ISO-8601.", "R3"),
            ("split", "They are in utc.", "R3"),
            ("wrong", "Use local time and epoch seconds.", "R3"),
            ("conflict", "This contradicts ADR-0002.", "R1"),
            ("no-conflict", "ADR-0002 is about signing; done.", "R1"),
        ]:
            b = hooked()
            b.text(text)
            b.result("And the format is ISO 8601." if name == "split" else "ok")
            runs.add(name, b.lines, variant)
        return runs

    def test_all_content_patterns_needed(self, runs) -> None:
        """R3 passes only when every content pattern occurs, possibly across several messages."""
        rows = runs.rule("states_content")
        assert rows["both"]["ok"] is True
        assert rows["split"]["ok"] is True and rows["split"]["evidence"] == [3, 4]
        assert rows["wrong"]["ok"] is False and "UTC" in rows["wrong"]["reason"]
        assert rows["conflict"]["ok"] is None  # R1 is match=id

    def test_conflict_flag(self, runs) -> None:
        """A conflict word is required where the scenario requires it, and R3 does not."""
        rows = runs.rule("flags_conflict")
        assert rows["conflict"]["ok"] is True
        assert rows["no-conflict"]["ok"] is False
        assert rows["both"] == {}


class TestNewAdr:
    def test_new_adr_on_topic(self, tmp_path) -> None:
        """Only an added (committed or not) regular file docs/adr/NNNN-*.md matching a topic pattern
        passes W's axis (b); a symlink with that name does not."""
        runs = Runs(tmp_path)
        cases = {
            "untracked-on-topic": [fab.SandboxFile("docs/adr/0007-dedup-webhooks.md", "added", "# x")],
            "added-body-on-topic": [fab.SandboxFile("docs/adr/0007-store.md", "added", "Drop duplicate ids")],
            "modified-existing": [fab.SandboxFile("docs/adr/0004-dedup.md", "modified", "dedup")],
            "off-topic": [fab.SandboxFile("docs/adr/0007-colours.md", "added", "blue")],
            "wrong-place": [fab.SandboxFile("docs/decisions/0007-dedup.md", "added", "dedup")],
            "not-numbered": [fab.SandboxFile("docs/adr/dedup.md", "added", "dedup")],
            "symlink": [fab.SandboxFile("docs/adr/0007-dedup.md", "added", "/etc/dedup", kind="symlink")],
        }
        for name, files in cases.items():
            b = hooked()
            b.write(files[0].path, files[0].content)
            b.text("Done.").result("Done.")
            runs.add(name, b.lines, "W1", files=files)
        rows = runs.rule("new_adr")
        assert {n: r["ok"] for n, r in rows.items()} == {
            "untracked-on-topic": True,
            "added-body-on-topic": True,
            "modified-existing": False,
            "off-topic": False,
            "wrong-place": False,
            "not-numbered": False,
            "symlink": False,
        }
        assert rows["untracked-on-topic"]["evidence"] == [3]  # the Write that made it


class TestValidRun:
    def test_validity(self, tmp_path) -> None:
        """No hook, a failed hook, no model turn, a client fault at any time, interruption, a missing
        result: INVALID; a timeout after the model's first turn is scored."""
        runs = Runs(tmp_path)
        ok = hooked().text("hi").result("hi").lines
        runs.add("valid", ok)
        runs.add("no-hook", fab.TranscriptBuilder().init().text("hi").result("hi").lines)
        runs.add(
            "hook-failed", fab.TranscriptBuilder().hook(outcome="error").init().text("hi").result("hi").lines
        )
        runs.add("crashed-early", hooked().lines, outcome="crashed")
        runs.add("timeout-after-turn", hooked().text("working").lines, outcome="timeout")
        runs.add("api-error-after-turn", hooked().text("working").lines, outcome="client_error")
        runs.add("timeout-no-turn", hooked().lines, outcome="timeout")
        runs.add("interrupted", ok, outcome="interrupted")
        runs.add("no-result", hooked().text("hi").lines)
        runs.add("unknown-variant", ok, "Z9")
        rows = runs.rule("valid_run")
        assert rows["valid"]["ok"] and rows["valid"]["evidence"] == [1]
        assert rows["timeout-after-turn"]["ok"] is True
        reasons = {n: r["reason"] for n, r in rows.items() if not r["ok"]}
        assert reasons == {
            "no-hook": "no SessionStart hook_response: the hook note never reached the model",
            "hook-failed": "SessionStart hook failed (seq 1)",
            "crashed-early": "crashed: fabricated",
            "api-error-after-turn": "client_error: fabricated",
            "timeout-no-turn": "timeout before the model's first turn",
            "interrupted": "interrupted: the recorder stopped before the rep ended",
            "no-result": "completed without a result event",
            "unknown-variant": "unknown variant Z9 (no scenario file defines it)",
        }


def _plain_stdout(lines: list[str], text: str) -> list[str]:
    """The same session, its SessionStart hook having printed plain text instead of JSON."""
    out = []
    for ln in lines:
        obj = json.loads(ln)
        if obj.get("subtype") == "hook_response":
            obj["output"] = obj["stdout"] = text
        out.append(json.dumps(obj))
    return out


class TestPluginHookNote:
    """Only the plugin's own SessionStart note (its `[name]` marker) makes a run valid."""

    def test_foreign_and_own_hook_notes(self, tmp_path) -> None:
        runs = Runs(tmp_path)

        def session(*notes: str) -> list[str]:
            b = fab.TranscriptBuilder()
            for note in notes:
                b.hook(note)
            return b.init().text("hi").result("hi").lines

        foreign = "[superpowers] You have superpowers. Read the skills list."
        runs.add("own", session(fab.HOOK_NOTE))
        runs.add("foreign-only", session(foreign))
        runs.add("foreign-then-own", session(foreign, fab.HOOK_NOTE))
        runs.add("empty-note", session(""))
        runs.add("marker-in-other-field", _plain_stdout(session(""), '{"systemMessage": "[os-adr] x"}'))
        runs.add("plain-stdout-note", _plain_stdout(session(""), fab.HOOK_NOTE + "\n"))
        runs.add("plain-stdout-foreign", _plain_stdout(session(""), foreign + "\n"))
        rows = runs.rule("valid_run")
        ok = {n: r["ok"] for n, r in rows.items()}
        assert ok == {
            "own": True,
            "foreign-only": False,
            "foreign-then-own": True,
            "empty-note": False,
            "marker-in-other-field": False,
            "plain-stdout-note": True,
            "plain-stdout-foreign": False,
        }
        assert rows["foreign-then-own"]["evidence"] == [3]  # the plugin's note, not the first hook
        assert rows["foreign-only"]["reason"] == (
            "no SessionStart hook note from the plugin ([os-adr] marker): the hook_response at seq 1 "
            "does not carry it"
        )

    def test_marker_follows_the_plugin_name(self, tmp_path) -> None:
        """A run recorded with another plugin needs that plugin's marker; `[os-adr]` does not do."""
        runs = Runs(tmp_path)
        lines = hooked().text("hi").result("hi").lines
        rid = runs.add("other-plugin", lines)
        other = fab.TranscriptBuilder().hook("[adr-lite] decisions live in docs/adr").init()
        rid2 = runs.add("other-plugin-own-note", other.text("hi").result("hi").lines)
        runs_dir = runs.archive.root / "runs"

        for r in (rid, rid2):
            f = runs_dir / f"{r}.parquet"
            pl.read_parquet(f).with_columns(plugin_name=pl.lit("adr-lite")).write_parquet(f)
        rows = runs.rule("valid_run")
        assert rows["other-plugin"]["ok"] is False
        assert "[adr-lite] marker" in rows["other-plugin"]["reason"]
        assert rows["other-plugin-own-note"]["ok"] is True


class TestFinalMessage:
    def test_result_text_then_last_main_text(self, tmp_path) -> None:
        """The judge sees the result event's text; without one, the main agent's last text block."""
        runs = Runs(tmp_path)
        b = hooked()
        b.text("first").text("second").result("the result")
        runs.add("with-result", b.lines, "W1")
        b = hooked()
        tid = b.task("sub")
        b.text("main last").text("sub text", parent=tid)
        runs.add("no-result", b.lines, "W1", outcome="timeout")
        rows = runs.rule("final_message")
        assert rows["with-result"]["text"] == "the result"
        assert rows["no-result"]["text"] == "main last"
