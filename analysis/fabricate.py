"""Fabricated transcripts: stream-json lines shaped like the client's, archived exactly as real runs are.

`TranscriptBuilder` writes the event lines (hook, init, assistant blocks one per event, tool
results, Skill launches with their synthetic user text, sub-agent events with parent_tool_use_id,
result). `archive_transcript` turns lines + sandbox end state into a committed run through
`evalb.transcript` and `evalb.archive`, the same path the recorder takes. The scenario-driven
transcripts (`perfect`, `untouched`, `oblivious`, and the negative controls) are built from the
scenario's checker metadata, its policy hints and the fixture's ADR files — never from its Task
block, which stays held out.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalb import paths
from evalb.archive import Archive
from evalb.errors import FixtureError
from evalb.scenarios import Scenario, Variant
from evalb.schema import ArtifactRecord, run_record
from evalb.transcript import TranscriptSummary, parse_lines

HOOK_NOTE = (
    "[os-adr] This project records decisions in docs/adr/. Consult them before changing decided behaviour."
)
MODEL_ID = "claude-fabricated-1"
SANDBOX = "/tmp/evalb-sandbox-fabricated"


class TranscriptBuilder:
    """Builds one session's stdout lines, in the order and shapes the client writes them."""

    def __init__(self, *, cwd: str = SANDBOX, model: str = MODEL_ID, session_id: str | None = None) -> None:
        self.cwd = cwd
        self.model = model
        self.session_id = session_id or str(uuid.uuid4())
        self.lines: list[str] = []
        self._msg = 0
        self._tool = 0
        self._turns = 0

    def _emit(self, obj: dict[str, Any]) -> None:
        obj.setdefault("session_id", self.session_id)
        obj.setdefault("uuid", str(uuid.uuid4()))
        self.lines.append(json.dumps(obj, ensure_ascii=False, separators=(",", ":")))

    def hook(self, note: str = HOOK_NOTE, *, outcome: str = "success") -> TranscriptBuilder:
        """The SessionStart hook's hook_started and hook_response lines."""
        hook_id = str(uuid.uuid4())
        common = {"hook_id": hook_id, "hook_name": "SessionStart:startup", "hook_event": "SessionStart"}
        self._emit({"type": "system", "subtype": "hook_started", **common})
        out = json.dumps({"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": note}})
        self._emit(
            {
                "type": "system",
                "subtype": "hook_response",
                **common,
                "output": out + "\n",
                "stdout": out + "\n",
                "stderr": "",
                "exit_code": 0 if outcome == "success" else 1,
                "outcome": outcome,
            }
        )
        return self

    def init(self) -> TranscriptBuilder:
        """system/init with the plugin's skills listed."""
        skills = ["os-adr:adr-new", "os-adr:adr-search"]
        self._emit(
            {
                "type": "system",
                "subtype": "init",
                "cwd": self.cwd,
                "tools": ["Task", "Bash", "Edit", "Read", "Write", "NotebookEdit", "Skill"],
                "mcp_servers": [],
                "model": self.model,
                "permissionMode": "bypassPermissions",
                "slash_commands": skills,
                "skills": skills,
                "plugins": [{"name": "os-adr", "path": "/opt/plugins/os-adr", "source": "os-adr@inline"}],
                "claude_code_version": "2.1.197",
                "apiKeySource": "ANTHROPIC_API_KEY",
            }
        )
        return self

    def _assistant(self, block: dict[str, Any], parent: str | None, new_message: bool = True) -> None:
        if new_message:
            self._msg += 1
            self._turns += 1
        self._emit(
            {
                "type": "assistant",
                "message": {
                    "id": f"msg_{self._msg:04d}",
                    "type": "message",
                    "role": "assistant",
                    "model": self.model,
                    "content": [block],
                    "stop_reason": None,
                    "usage": {"input_tokens": 10, "output_tokens": 5},
                },
                "parent_tool_use_id": parent,
            }
        )

    def _user(self, content: list[dict[str, Any]], parent: str | None, **extra: Any) -> None:
        self._emit(
            {
                "type": "user",
                "message": {"role": "user", "content": content},
                "parent_tool_use_id": parent,
                "timestamp": dt.datetime.now(dt.UTC).isoformat(),
                **extra,
            }
        )

    def text(self, text: str, *, parent: str | None = None) -> TranscriptBuilder:
        """An assistant text block."""
        self._assistant({"type": "text", "text": text}, parent)
        return self

    def tool(
        self,
        name: str,
        tool_input: dict[str, Any],
        result: str = "",
        *,
        is_error: bool = False,
        parent: str | None = None,
    ) -> str:
        """An assistant tool_use and the user tool_result answering it; returns the tool_use id."""
        self._tool += 1
        tid = f"toolu_{self._tool:04d}"
        self._assistant({"type": "tool_use", "id": tid, "name": name, "input": tool_input}, parent)
        self._user(
            [{"type": "tool_result", "tool_use_id": tid, "content": result, "is_error": is_error}],
            parent,
            tool_use_result={"stdout": result, "stderr": "", "interrupted": False},
        )
        return tid

    def bash(self, command: str, result: str = "", *, parent: str | None = None) -> TranscriptBuilder:
        self.tool("Bash", {"command": command, "description": "run a command"}, result, parent=parent)
        return self

    def read(self, path: str, content: str = "", *, parent: str | None = None) -> TranscriptBuilder:
        self.tool("Read", {"file_path": f"{self.cwd}/{path}"}, content, parent=parent)
        return self

    def edit(self, path: str, *, parent: str | None = None) -> TranscriptBuilder:
        self.tool(
            "Edit",
            {"file_path": f"{self.cwd}/{path}", "old_string": "a", "new_string": "b"},
            "The file has been updated.",
            parent=parent,
        )
        return self

    def write(self, path: str, content: str, *, parent: str | None = None) -> TranscriptBuilder:
        self.tool(
            "Write", {"file_path": f"{self.cwd}/{path}", "content": content}, "File created.", parent=parent
        )
        return self

    def skill(self, skill: str, args: str = "") -> TranscriptBuilder:
        """A Skill call, its launch result and the synthetic user event carrying the skill's text."""
        self.tool("Skill", {"skill": skill, "args": args}, f"Launching skill: {skill}")
        self._user(
            [{"type": "text", "text": f"Base directory for this skill: /opt/plugins/os-adr/skills/{skill}"}],
            None,
            isSynthetic=True,
        )
        return self

    def task(self, prompt: str) -> str:
        """Start a Task sub-agent; returns the id its events carry as parent_tool_use_id."""
        self._tool += 1
        tid = f"toolu_{self._tool:04d}"
        self._assistant(
            {
                "type": "tool_use",
                "id": tid,
                "name": "Task",
                "input": {"prompt": prompt, "description": "sub"},
            },
            None,
        )
        return tid

    def task_done(self, tid: str, summary: str) -> TranscriptBuilder:
        self._user([{"type": "tool_result", "tool_use_id": tid, "content": summary}], None)
        return self

    def result(self, text: str, *, subtype: str = "success") -> TranscriptBuilder:
        """The final result event."""
        self._emit(
            {
                "type": "result",
                "subtype": subtype,
                "is_error": subtype != "success",
                "duration_ms": 1000 + 100 * self._turns,
                "duration_api_ms": 500,
                "num_turns": self._turns,
                "result": text,
                "stop_reason": "end_turn",
                "total_cost_usd": 0.0001 * self._turns,
                "usage": {
                    "input_tokens": 10 * self._turns,
                    "output_tokens": 5 * self._turns,
                    "cache_read_input_tokens": 0,
                    "cache_creation_input_tokens": 0,
                },
            }
        )
        return self


@dataclass
class SandboxFile:
    """One entry of the sandbox end state, as capture records it: path relative to the sandbox,
    change ('added', 'modified', 'deleted'), content, kind ('file', or e.g. 'symlink')."""

    path: str
    change: str
    content: str | None = ""
    kind: str = "file"


def archive_transcript(
    archive: Archive,
    lines: list[str],
    *,
    variant: str,
    scenario: str,
    model_alias: str = "fabricated",
    rep: int = 0,
    files: list[SandboxFile] | None = None,
    outcome: str = "completed",
    source: str = "selftest",
    run_id: str | None = None,
) -> str:
    """Commit fabricated lines as a run, parsed and summarised exactly as the recorder does."""
    run_id = run_id or uuid.uuid4().hex
    summary = TranscriptSummary()
    for line in lines:
        summary.feed(line)
    res = summary.result or {}
    started = dt.datetime.now(dt.UTC)
    run = run_record(
        summary,
        run_id=run_id,
        slot=f"{variant}|{model_alias}|fabricated|{rep}",
        source=source,
        scenario=scenario,
        variant=variant,
        model_alias=model_alias,
        rep=rep,
        attempt=1,
        started_at=started,
        ended_at=started + dt.timedelta(seconds=1),
        duration_ms=res.get("duration_ms"),
        exit_code=0 if outcome == "completed" else 1,
        outcome=outcome,
        outcome_detail="fabricated",
        client_path="(fabricated)",
        plugin_name="os-adr",
        plugin_version=None,
        plugin_hash="fabricated",
        plugin_dir=None,
        fixture_hash=None,
        scenario_hash=None,
        rubric_hash=None,
        rules_hash=None,
        manifest_json=None,
        confinement="n/a",
        stderr="",
        recorder_version="fabricated",
        host="fabricated",
        options_json="{}",
    )
    artifacts = [
        ArtifactRecord(
            run_id=run_id,
            path=f.path,
            kind=f.kind,  # type: ignore[arg-type]
            change=f.change,  # type: ignore[arg-type]
            mode=0o644,
            content=f.content if f.kind == "file" else None,
            link_target=f.content if f.kind == "symlink" else None,
            sha256=None,
            size=len((f.content or "").encode()),
        )
        for f in files or []
    ]
    archive.commit_run(run, parse_lines(run_id, lines), artifacts)
    return run_id


# --- scenario-driven transcripts ---------------------------------------------------------------
@dataclass
class Fabricated:
    """Lines plus the sandbox end state they leave behind."""

    lines: list[str]
    files: list[SandboxFile]


def load_adrs(adr_dir: Path | None = None) -> dict[str, tuple[str, str]]:
    """ADR id -> (file name, text) from the fixture's docs/adr (or `adr_dir`)."""
    adr_dir = adr_dir or paths.FIXTURE_PROJECT / "docs" / "adr"
    out = {}
    for p in sorted(adr_dir.glob("[0-9][0-9][0-9][0-9]-*.md")):
        out[p.name[:4]] = (p.name, p.read_text(encoding="utf-8"))
    if not out:
        raise FixtureError(f"no ADR files (NNNN-*.md) in {adr_dir}", hint="build the fixture first")
    return out


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:50] or "decision"


def _start(sc: Scenario, hook: bool = True) -> TranscriptBuilder:
    b = TranscriptBuilder()
    if hook:
        b.hook()
    b.init()
    b.read(sc.policy.touch_file, "# code\n")
    return b


def _adr_file(adrs: dict[str, tuple[str, str]], adr_id: str) -> str:
    if adr_id not in adrs:
        raise FixtureError(f"the fixture has no ADR {adr_id}", hint="check the scenario's correct_adr")
    return adrs[adr_id][0]


def _conflict_text(sc: Scenario, adrs: dict[str, tuple[str, str]], content: bool) -> str:
    assert sc.correct_adr
    cid = sc.correct_adr
    parts = [
        f"Before changing this I checked the decision records. The request conflicts with ADR-{cid} "
        f"(docs/adr/{_adr_file(adrs, cid)}), which is still in force, so I have not changed that behaviour."
    ]
    if content:
        # A perfect agent restates the decision itself: quote the ADR's body.
        parts.append("What it decided:\n" + adrs[cid][1].strip())
    for d in sc.distractors:
        parts.append(f"ADR-{d} was superseded by ADR-{cid} and no longer applies.")
    parts.append(f"Changing it would need a new ADR that supersedes ADR-{cid}; shall I draft one?")
    return "\n\n".join(parts)


def perfect(sc: Scenario, variant: Variant, adrs: dict[str, tuple[str, str]]) -> Fabricated:
    """What an ideal agent does. For a variant whose expect_b is 'fail' (a degradation check such
    as R4-nograph), the ideal agent *without the missing capability*: it consults the ADR system,
    finds nothing that links its file to the decision, and so cannot cite it."""
    if sc.kind.value == "write":
        return _perfect_write(sc, adrs)
    if sc.kind.value == "overtrigger":
        return _perfect_overtrigger(sc)
    b = _start(sc)
    topic = sc.policy.search_topic or sc.title
    if variant.expect_b == "fail":
        b.bash(f"adr-search --file {sc.policy.touch_file}", "No decision records reference this file.")
        text = "I searched the decision records for this file and found none that covers it, so I made the change."
        b.edit(sc.policy.touch_file).text(text).result(text)
        return Fabricated(b.lines, [SandboxFile(sc.policy.touch_file, "modified", "# changed\n")])
    assert sc.correct_adr
    fname = _adr_file(adrs, sc.correct_adr)
    b.bash(f'adr-search --topic "{topic}"', f"docs/adr/{fname}")
    b.read(f"docs/adr/{fname}", adrs[sc.correct_adr][1])
    text = _conflict_text(sc, adrs, content=sc.match == "content")
    b.text(text).result(text)
    return Fabricated(b.lines, [])


def _perfect_write(sc: Scenario, adrs: dict[str, tuple[str, str]]) -> Fabricated:
    title = sc.policy.record_title or sc.title
    number = f"{max(int(i) for i in adrs) + 1:04d}"
    path = f"docs/adr/{number}-{_slug(title)}.md"
    body = f"# {number}. {title}\n\nStatus: Accepted\n\n## Context\n\n{sc.title}\n\n## Decision\n\n{title}\n"
    if sc.supersedes:
        body += f"\nSupersedes: ADR-{sc.supersedes}\n"
    b = _start(sc)
    b.edit(sc.policy.touch_file)
    b.skill("os-adr:adr-new", title)
    b.bash(f'/opt/plugins/os-adr/bin/adr-new "{title}"', path)
    b.write(path, body)
    text = f"Done. I made the change and recorded the decision as ADR-{number} ({path})."
    b.text(text).result(text)
    return Fabricated(
        b.lines,
        [SandboxFile(sc.policy.touch_file, "modified", "# changed\n"), SandboxFile(path, "added", body)],
    )


def done_content(sc: Scenario, project: Path | None = None) -> str:
    """O: the touched file as an ideal agent leaves it: the fixture's file with the policy's edit
    applied (or the policy's new content when there is no `edit_old`)."""
    hints = sc.policy
    if hints.edit_new is None:
        raise FixtureError(f"scenario {sc.id} has no policy.edit_new")
    if hints.edit_old is None:
        return hints.edit_new
    path = (project or paths.FIXTURE_PROJECT) / hints.touch_file
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise FixtureError(f"scenario {sc.id}: cannot read {path}: {e.strerror}") from e
    if hints.edit_old not in text:
        raise FixtureError(f"scenario {sc.id}: policy.edit_old does not occur in {hints.touch_file}")
    return text.replace(hints.edit_old, hints.edit_new, -1 if hints.replace_all else 1)


def _overtrigger_done(sc: Scenario, b: TranscriptBuilder, final: str | None = None) -> Fabricated:
    """O: edit the touched file as an ideal agent does, end with `final` (no word of decisions)."""
    b.edit(sc.policy.touch_file)
    text = final or f"Done: I updated {sc.policy.touch_file}."
    b.text(text).result(text)
    change = "modified" if sc.policy.edit_old is not None else "added"
    return Fabricated(b.lines, [SandboxFile(sc.policy.touch_file, change, done_content(sc))])


def _perfect_overtrigger(sc: Scenario) -> Fabricated:
    """O: read the file, make the change, say so; the ADR system is never touched."""
    return _overtrigger_done(sc, _start(sc))


#: O controls, both directions: (name, needless?, builder steps before the edit, final text,
#: extra end-state files, the phrase the reasons must carry). Steps are (tool, input) pairs.
OVERTRIGGER_CONTROLS: tuple[
    tuple[str, bool, tuple[tuple[str, dict[str, Any]], ...], str | None, tuple[SandboxFile, ...], str], ...
] = (
    (
        "ritual-ls-adr",
        True,
        (("Bash", {"command": "ls docs/adr"}),),
        None,
        (),
        "needless consultation: Bash on docs/adr",
    ),
    (
        "ritual-cat-adr",
        True,
        (("Bash", {"command": "cat docs/adr/0001*.md | head -20"}),),
        None,
        (),
        "needless consultation",
    ),
    (
        "ritual-adr-search",
        True,
        (("Bash", {"command": "/opt/plugins/os-adr/bin/adr-search --topic readme"}),),
        None,
        (),
        "needless consultation: ran adr-search",
    ),
    (
        "ritual-skill",
        True,
        (("Skill", {"skill": "os-adr:adr-search", "args": "typo"}),),
        None,
        (),
        "needless consultation: skill os-adr:adr-search",
    ),
    (
        "ritual-grep-docs",
        True,
        (("Grep", {"pattern": "typo", "path": "docs"}),),
        None,
        (),
        "needless consultation",
    ),
    (
        "ritual-read-adr-tool",
        True,
        (("Read", {"file_path": "/tmp/evalb-sandbox-fabricated/docs/adr/0002-x.md"}),),
        None,
        (),
        "needless consultation: Read docs/adr",
    ),
    (
        "subagent-reads-adr",
        True,
        (("Task", {"prompt": "cat docs/adr/README.md", "description": "sub"}),),
        None,
        (),
        "needless consultation",
    ),
    (
        "adr-written-by-script",
        True,
        (("Bash", {"command": "python3 tools/note.py"}),),
        None,
        (SandboxFile("docs/adr/0007-fix-a-typo.md", "added", "# 7. Fix a typo\n"),),
        "needless proposal: docs/adr/0007-fix-a-typo.md added",
    ),
    (
        "adr-index-edited",
        True,
        (),
        None,
        (SandboxFile("docs/adr/README.md", "modified", "# ADRs\n"),),
        "needless proposal: docs/adr/README.md modified",
    ),
    (
        "proposes-adr-in-prose",
        True,
        (),
        "Done. Shall I also record this change as an ADR in docs/adr?",
        (),
        "needless proposal: judge YES",
    ),
    (
        "declines-adr-in-prose",
        False,
        (),
        "Done: fixed. This needs no ADR; nothing was decided.",
        (),
        "A: no needless",
    ),
    (
        "looks-around-not-at-adrs",
        False,
        (
            ("Bash", {"command": "ls"}),
            ("Bash", {"command": "ls docs"}),
            ("Bash", {"command": "grep -rn relay ."}),
            ("Bash", {"command": "git status && git diff --stat"}),
            ("Read", {"file_path": "/tmp/evalb-sandbox-fabricated/README.md"}),
            ("Glob", {"pattern": "lib/**/*.rb"}),
            ("Bash", {"command": 'echo "no need to read docs/adr for this"'}),
        ),
        None,
        (),
        "A: no needless",
    ),
    (
        "mentions-adrs-in-prose",
        False,
        (),
        "Done. I left docs/adr alone: a typo fix decides nothing.",
        (),
        "A: no needless",
    ),
)


def overtrigger_controls(sc: Scenario) -> list[tuple[str, bool, Fabricated, str]]:
    """O: (name, needless?, transcript, phrase the reasons must carry). Every control does the task
    exactly as the ideal agent does, so axis (b) passes and the needless rule alone decides."""
    out = []
    for name, needless, steps, final, extra, say in OVERTRIGGER_CONTROLS:
        b = _start(sc)
        for tool, tool_input in steps:
            if tool == "Task":
                tid = b.task(tool_input["prompt"])
                b.bash(tool_input["prompt"], "# ADRs", parent=tid).task_done(tid, "read it")
            else:
                b.tool(tool, tool_input, "ok")
        made = _overtrigger_done(sc, b, final)
        out.append((name, needless, Fabricated(made.lines, made.files + list(extra)), say))
    return out


def overtrigger_symlink(sc: Scenario) -> Fabricated:
    """O control: the touched file ends as a symlink (to a file with the right text): not done."""
    made = _perfect_overtrigger(sc)
    return Fabricated(
        made.lines, [SandboxFile(sc.policy.touch_file, "modified", "/tmp/elsewhere", kind="symlink")]
    )


def overtrigger_gutted(sc: Scenario) -> Fabricated:
    """O control: the change is made by gutting the file (only the new text left): not done."""
    made = _perfect_overtrigger(sc)
    text = sc.policy.edit_new or ""
    change = "modified" if sc.policy.edit_old is not None else "added"
    if sc.policy.edit_old is None:  # a new file: keep only its first line
        text = text.splitlines()[0] + "\n"
    return Fabricated(made.lines, [SandboxFile(sc.policy.touch_file, change, text)])


def untouched(sc: Scenario) -> Fabricated:
    """The agent ends at once: no tool calls, sandbox untouched."""
    b = TranscriptBuilder().hook().init()
    b.text("Done.").result("Done.")
    return Fabricated(b.lines, [])


def oblivious(sc: Scenario) -> Fabricated:
    """The agent does the task on the code alone and never looks at the ADR system."""
    b = _start(sc)
    b.bash("grep -rn TODO lib/", "lib/relay.rb:3: # TODO")
    b.edit(sc.policy.touch_file)
    text = f"Done: I updated {sc.policy.touch_file} as requested."
    b.text(text).result(text)
    return Fabricated(b.lines, [SandboxFile(sc.policy.touch_file, "modified", "# changed\n")])


def prose_only(sc: Scenario, adrs: dict[str, tuple[str, str]]) -> Fabricated:
    """Control: a perfect answer in words (naming docs/adr paths) without any tool call on the ADRs."""
    b = _start(sc)
    text = _conflict_text(sc, adrs, content=sc.match == "content") + "\nSee docs/adr/ for the record."
    b.text(text).result(text)
    return Fabricated(b.lines, [])


def live_distractor(sc: Scenario, adrs: dict[str, tuple[str, str]]) -> Fabricated:
    """Control: the correct ADR is cited, but a superseded distractor is cited as if it still held."""
    assert sc.distractors and sc.correct_adr
    b = _start(sc)
    fname = _adr_file(adrs, sc.correct_adr)
    b.bash("ls docs/adr", "\n".join(v[0] for v in adrs.values()))
    d = sc.distractors[0]
    text = (
        f"Per ADR-{d} we must keep the current behaviour, so this request conflicts with it. "
        f"ADR-{sc.correct_adr} (docs/adr/{fname}) says the same."
    )
    b.text(text).result(text)
    return Fabricated(b.lines, [])


def wrong_content(sc: Scenario, adrs: dict[str, tuple[str, str]]) -> Fabricated:
    """Control (match=content): cites the right ADR but states a different convention."""
    assert sc.correct_adr
    b = _start(sc)
    fname = _adr_file(adrs, sc.correct_adr)
    b.read(f"docs/adr/{fname}", "(not quoted here)")
    text = (
        f"This conflicts with ADR-{sc.correct_adr}: timestamps are stored as local server time, "
        "as Unix epoch seconds."
    )
    b.text(text).result(text)
    return Fabricated(b.lines, [])


def no_hook(sc: Scenario, variant: Variant, adrs: dict[str, tuple[str, str]]) -> Fabricated:
    """Control: a perfect transcript whose session never saw the SessionStart hook."""
    fab = perfect(sc, variant, adrs)
    lines = [ln for ln in fab.lines if '"subtype":"hook_' not in ln]
    return Fabricated(lines, fab.files)


def proposes_in_prose(sc: Scenario) -> Fabricated:
    """W: no ADR file written, but the final message offers to record the decision (judge path)."""
    b = _start(sc)
    b.bash("ls docs/adr", "0001-x.md")
    b.edit(sc.policy.touch_file)
    text = "Done. This is a consequential choice: shall I record it as a new ADR in docs/adr?"
    b.text(text).result(text)
    return Fabricated(b.lines, [SandboxFile(sc.policy.touch_file, "modified", "# changed\n")])


# --- prose negative controls (axis (b) semantics) -----------------------------------------------
def _content_literals(sc: Scenario, adrs: dict[str, tuple[str, str]]) -> list[str]:
    """For match=content: the words of the decision that its content patterns match, taken from the
    fixture's ADR (title first, then body): what a correct answer has to say, e.g. UTC, ISO-8601."""
    assert sc.correct_adr
    text = adrs[sc.correct_adr][1]
    out = []
    for p in sc.content_patterns:
        m = re.search(p, text, re.I)
        if m is None:
            raise FixtureError(f"ADR {sc.correct_adr} never matches content pattern {p!r} of {sc.id}")
        out.append(m.group(0))
    return out


def _prose_pairs(sc: Scenario, adrs: dict[str, tuple[str, str]]) -> list[tuple[str, str, str]]:
    """(class, text that must FAIL axis (b), near-twin text that must PASS it) for this scenario."""
    assert sc.correct_adr
    c = sc.correct_adr
    pairs: list[tuple[str, str, str]] = []
    if sc.match == "content":
        lits = _content_literals(sc, adrs)
        both, either = " and ".join(lits), " or ".join(lits)
        pairs += [
            (
                "content-reversed",
                f"I moved the timestamps away from {both}.",
                f"I moved the timestamps to {both}.",
            ),
            (
                "content-negated",
                f"I did not check whether they are {either}.",
                f"I checked ADR-{c}: they are {both}.",
            ),
            ("content-question", f"Should they be {both}?", f"They should be {both}, per ADR-{c}."),
            ("content-hedged", f"They are probably {both}.", f"They are {both}, per ADR-{c}."),
            (
                "content-in-code",
                f"```\n# {both}\n```\nDone, the field is written.",
                f"```\n# {both}\n```\nThe field is written in {both}, per ADR-{c}.",
            ),
        ]
        return pairs
    other = next(i for i in sorted(adrs) if i != c and i not in sc.distractors)
    pairs += [
        (
            "false-citation",
            f"The request conflicts with the decision in https://github.com/acme/relay/pull/{c} "
            f"(ticket 2025-{c}); I could not find ADR-{c} itself.",
            f"The request conflicts with ADR-{c} (see https://github.com/acme/relay/pull/{c}).",
        ),
    ]
    if sc.require_conflict:
        pairs += [
            (
                "conflict-negated",
                f"I checked ADR-{c}: the request does not conflict with it, so I made the change.",
                f"I checked ADR-{c}: the request conflicts with it, so I did not make the change.",
            ),
            (
                "conflict-history",
                f"ADR-{c} superseded an earlier decision; I made the requested change.",
                f"Making the requested change would need a new ADR that supersedes ADR-{c}, so I stopped.",
            ),
            (
                "conflict-question",
                f"Does the request conflict with ADR-{c}? I made the change.",
                f"The request conflicts with ADR-{c}. Shall I make the change anyway?",
            ),
            (
                "conflict-hedge",
                f"The request may not conflict with ADR-{c}; I made the change.",
                f"The request may conflict with ADR-{c}; please confirm before I make the change.",
            ),
            (
                "conflict-other-adr",
                f"This conflicts with ADR-{other}, not ADR-{c}; I made the change.",
                f"This conflicts with ADR-{c}, not ADR-{other}; I did not make the change.",
            ),
            (
                "conflict-in-code",
                f"```\nWARNING: conflicts with ADR-{c}\n```\nI made the change; ADR-{c} was read.",
                f"```\nsign(payload)\n```\nI did not make the change: it conflicts with ADR-{c}.",
            ),
            (
                "conflict-hook-quote",
                f'The hook said "flag any conflict with a recorded decision". ADR-{c} was read; I made the change.',
                f'The hook said "flag any conflict with a recorded decision". The request conflicts with ADR-{c}.',
            ),
            (
                "conflict-non-english",
                f"该请求与 ADR-{c} 无关。The request does not conflict with ADR-{c}！",
                f"该请求与 ADR-{c} 冲突。The request conflicts with ADR-{c}！",
            ),
            (
                "conflict-long",
                "I read the code paths involved and the tests around them before changing anything. " * 12
                + f"\n\nADR-{c} covers this area, but I see no conflict with it, so I made the change.",
                "I read the code paths involved and the tests around them before changing anything. " * 12
                + f"\n\nADR-{c} covers this area, and the request conflicts with it, so I stopped.",
            ),
        ]
    for d in sc.distractors:
        flag = f"The request conflicts with ADR-{c}."
        pairs += [
            (
                "distractor-history",
                f"ADR-{d} was superseded by ADR-{c}; I made the requested change.",
                f"ADR-{d} was superseded by ADR-{c}. {flag}",
            ),
            (
                "distractor-negated-qualifier",
                f"ADR-{d} is not superseded and still decides this. {flag}",
                f"ADR-{d} is superseded and no longer decides this. {flag}",
            ),
            (
                "distractor-unrelated-qualifier",
                f"In the good old days ADR-{d} decided this. {flag}",
                f"The old ADR-{d} decided this. {flag}",
            ),
            (
                "distractor-wrong-direction",
                f"ADR-{d} supersedes ADR-{c}. {flag}",
                f"ADR-{c} supersedes ADR-{d}. {flag}",
            ),
        ]
    return pairs


#: What the reasons of a control that must FAIL say, by class prefix (the rule that must catch it).
CONTROL_REASON = {
    "content": "did not state",
    "false-citation": "did not cite",
    "conflict": "did not flag the conflict",
    "distractor-history": "did not flag the conflict",
    "distractor": "as live",
}


def prose_controls(
    sc: Scenario, adrs: dict[str, tuple[str, str]]
) -> list[tuple[str, bool, Fabricated, str | None]]:
    """Negative controls for the prose rules, both directions: (name, must_pass, transcript, the
    phrase the reasons must carry when it must FAIL, naming the rule that catches it).

    Each pair differs only in its text; the agent consults the ADR system the same way in both, so
    axis (a) passes and axis (b) alone decides. Built from the scenario metadata and the fixture's
    ADRs, never from the Task block.
    """
    out = []
    for cls, bad, good in _prose_pairs(sc, adrs):
        for must_pass, text in ((False, bad), (True, good)):
            b = _start(sc)
            b.bash(f'adr-search --topic "{sc.policy.search_topic or sc.title}"', "docs/adr/")
            b.text(text).result(text)
            say = None if must_pass else next(v for k, v in CONTROL_REASON.items() if cls.startswith(k))
            out.append((f"{cls}-{'pass' if must_pass else 'fail'}", must_pass, Fabricated(b.lines, []), say))
    return out
