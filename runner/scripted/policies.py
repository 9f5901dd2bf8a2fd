"""Scripted model policies: small programs that play an agent, acting on what the tools really returned.

A policy is a generator: it yields an action (a tool call or the final answer) and receives the
tool's result text. The server is stateless between requests, so each request replays the
conversation so far into a fresh generator (same seed, same draws) to reach the next action.

Policies never read the Task block: they know the scenario only through its `policy:` hints
(which file the task concerns, what an ideal agent would search or record), and they learn the
plugin's CLI location from the SessionStart note the client put in front of them.
"""

from __future__ import annotations

import json
import os
import random
import re
import shlex
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalb.errors import PolicyError
from evalb.scenarios import PolicyHints


@dataclass(frozen=True)
class ToolCall:
    """Call a client tool; `preface` is optional text sent before it in the same message."""

    name: str
    input: dict[str, Any]
    preface: str | None = None


@dataclass(frozen=True)
class Final:
    """End the turn with this text."""

    text: str


Action = ToolCall | Final
Program = Generator[Action, str, None]


@dataclass
class Observation:
    """What the model sees besides tool results: the SessionStart note and the working directory."""

    hook_note: str | None = None
    cwd: str | None = None


@dataclass
class RepContext:
    """Everything a policy may know about its rep (registered with the server by the runner)."""

    variant: str
    kind: str  # "write" | "retrieval" | "overtrigger" | "judge"
    hints: PolicyHints | None
    policy: str
    params: dict[str, float] = field(default_factory=dict)
    seed: int = 0


# --- reading tool output ------------------------------------------------------------------------
@dataclass(frozen=True)
class AdrEntry:
    id: str
    status: str
    title: str
    path: str
    note: str = ""


_ENTRY = re.compile(r"^ADR-(\d{4})\t(\w+)\t([^\t]*)\t(\S+)(?:\t(.*))?$", re.M)
_ADR_FILE = re.compile(r"(?:^|[\s/])(docs/adr/(\d{4})-[\w.-]+\.md)")
_BIN = re.compile(r"(/[^\s'\"`]+?/bin)(?:/adr-[\w-]+)?(?=[\s'\"`.,;:)]|$)")
_DECISION = re.compile(r"^## Decision\s*\n(.*?)(?=^## |\Z)", re.S | re.M)
_CREATED = re.compile(r"Created (docs/adr/\S+\.md) \(ADR-(\d{4})\)")


def parse_entries(output: str) -> list[AdrEntry]:
    """ADR lines printed by `adr-search` / `adr-list` (tab-separated contract of the plugin)."""
    return [AdrEntry(m[0], m[1], m[2], m[3], m[4] or "") for m in _ENTRY.findall(output)]


def plugin_bin(note: str | None) -> str | None:
    """The plugin's CLI directory as the SessionStart note names it, if it does."""
    if not note:
        return None
    m = _BIN.search(note)
    return m.group(1) if m else None


def decision_text(adr_body: str) -> str:
    """The first paragraph of an ADR's Decision section, on one line."""
    m = _DECISION.search(adr_body)
    text = (m.group(1) if m else adr_body).strip().split("\n\n")[0]
    return " ".join(text.split())


def _bash(cmd: str, preface: str | None = None) -> ToolCall:
    return ToolCall("Bash", {"command": cmd, "description": cmd.split()[0].rsplit("/", 1)[-1]}, preface)


def _need_hints(ctx: RepContext) -> PolicyHints:
    if ctx.hints is None:
        raise PolicyError(f"policy {ctx.policy!r} needs scenario hints for {ctx.variant}")
    return ctx.hints


# --- building blocks --------------------------------------------------------------------------------
def _consult(ctx: RepContext, obs: Observation, hints: PolicyHints) -> Generator[Action, str, list[AdrEntry]]:
    """Search the decision records the way the plugin offers (CLI), or by hand without it."""
    bindir = plugin_bin(obs.hook_note)
    preface = "Before changing anything, let me check whether a recorded decision covers this."
    if bindir:
        if hints.search_file:
            query = f"--file {shlex.quote(hints.search_file)}"
        else:
            query = f"--topic {shlex.quote(hints.search_topic or hints.touch_file)}"
        out = yield _bash(f"{bindir}/adr-search {query}", preface)
        return parse_entries(out)
    words = (hints.search_topic or "").split()
    pattern = "|".join(re.escape(w) for w in words) or "."
    out = yield _bash(f"grep -ilE {shlex.quote(pattern)} docs/adr/*.md", preface)
    entries = []
    for path, adr_id in _ADR_FILE.findall(out):
        body = yield _bash(f"cat {path}")
        status = "Superseded" if re.search(r"^status:\s*Superseded", body, re.M) else "Accepted"
        entries.append(AdrEntry(adr_id, status, "", path))
    return entries


def _cite(entry: AdrEntry, body: str, superseded: list[AdrEntry], conflict: bool) -> str:
    decision = decision_text(body)
    title = f" ({entry.title})" if entry.title else ""
    parts = [
        f"Before making this change I checked the project's recorded decisions. ADR-{entry.id}{title} is in force: {decision}"
    ]
    if conflict:
        parts.append(
            f"The requested change conflicts with ADR-{entry.id}, so I have not made it. If you still want it, "
            f"we should first record a new decision that supersedes ADR-{entry.id}."
        )
    for s in superseded:
        parts.append(f"(ADR-{s.id} is an older record that has been superseded; it no longer applies.)")
    return "\n\n".join(parts)


def _read(path: str) -> ToolCall:
    return _bash(f"cat {shlex.quote(path)}")


def _do_task(ctx: RepContext, obs: Observation, hints: PolicyHints) -> Program:
    """O: make the change the hints describe with the client's own file tools (Read then Edit, or
    Write for a new file), then say so without a word about decisions."""
    if hints.edit_new is None:
        raise PolicyError(f"policy {ctx.policy!r} needs policy.edit_new for {ctx.variant}")
    if not obs.cwd:
        raise PolicyError(f"policy {ctx.policy!r} needs the working directory for {ctx.variant}")
    path = f"{obs.cwd.rstrip('/')}/{hints.touch_file}"
    if hints.edit_old is None:
        yield ToolCall("Write", {"file_path": path, "content": hints.edit_new}, "Adding the file.")
    else:
        yield ToolCall("Read", {"file_path": path})
        edit: dict[str, Any] = {"file_path": path, "old_string": hints.edit_old, "new_string": hints.edit_new}
        if hints.replace_all:
            edit["replace_all"] = True
        yield ToolCall("Edit", edit)
    yield Final(f"Done: {hints.touch_file} is updated.")


# --- policies -----------------------------------------------------------------------------------------
def oracle(ctx: RepContext, obs: Observation) -> Program:
    """What an ideal agent does: consult the records, then cite the live one or record the decision;
    on an over-triggering task (nothing decided), just do the task."""
    hints = _need_hints(ctx)
    if ctx.kind == "overtrigger":
        yield from _do_task(ctx, obs, hints)
    elif ctx.kind == "write":
        yield from _record(ctx, obs, hints)
    else:
        yield from _retrieve(ctx, obs, hints, cite_correctly=True)


def oblivious(ctx: RepContext, obs: Observation) -> Program:
    """Never consults the decision records: reads the code and answers."""
    hints = _need_hints(ctx)
    yield _read(hints.touch_file)
    yield Final(
        f"I've looked at {hints.touch_file}; the change is straightforward and I've gone ahead with it."
    )


#: A wording's stand-in: probabilities a (test) plugin's SessionStart note carries, e.g.
#: "[evalb-scripted p_consult=0.9]"; `stochastic` takes them over the model's own parameters, so
#: the plugin's wording, as it reaches the model, drives the scripted agent (docs/runner.md, Arms).
WORDING_MARKER = re.compile(r"\[evalb-scripted((?:\s+p_[a-z]+=(?:0|1|0?\.\d+|1\.0+))+)\s*\]")


def wording_params(note: str | None) -> dict[str, float]:
    """The probabilities a SessionStart note's wording marker sets (unknown names are ignored)."""
    m = WORDING_MARKER.search(note or "")
    if not m:
        return {}
    pairs = (item.split("=") for item in m.group(1).split())
    return {k: float(v) for k, v in pairs if k in PARAMS and k != "seed"}


def stochastic(ctx: RepContext, obs: Observation) -> Program:
    """Consults with p_consult; then cites correctly with p_cite (R) or records / proposes (W); on
    an over-triggering task (O) it does the task, after a needless consultation with p_consult.

    A wording marker in the SessionStart note (`wording_params`) overrides the model's parameters.
    The draws depend on the rep's seed only, so the arms of one (variant, model, rep) share them."""
    hints = _need_hints(ctx)
    rng = random.Random(ctx.seed)
    p = {"p_consult": 0.7, "p_cite": 0.8, "p_record": 0.5, "p_propose": 0.3, **ctx.params}
    p |= wording_params(obs.hook_note)
    consult, u = rng.random() < p["p_consult"], rng.random()
    if ctx.kind == "overtrigger":  # p_consult is then the rate of needless (ritual) consultation
        if consult:
            yield from _consult(ctx, obs, hints)
        yield from _do_task(ctx, obs, hints)
        return
    if not consult:
        yield from oblivious(ctx, obs)
        return
    if ctx.kind == "write":
        if u < p["p_record"]:
            yield from _record(ctx, obs, hints)
        else:
            yield from _consult(ctx, obs, hints)
            yield _read(hints.touch_file)
            if u < p["p_record"] + p["p_propose"]:
                yield Final(
                    f"Done. This is a consequential choice: shall I record it as a decision record "
                    f'("{hints.record_title}") so later changes can find it?'
                )
            else:
                yield Final(f"Done: the change is in {hints.touch_file}.")
    else:
        yield from _retrieve(ctx, obs, hints, cite_correctly=u < p["p_cite"])


def ritual(ctx: RepContext, obs: Observation) -> Program:
    """Consults the records first on every task, whatever it is (a wording that makes agents open
    docs/adr by ritual), then acts as the oracle: needless on every over-triggering task."""
    hints = _need_hints(ctx)
    yield from _consult(ctx, obs, hints)
    yield from oracle(ctx, obs)


def _retrieve(ctx: RepContext, obs: Observation, hints: PolicyHints, *, cite_correctly: bool) -> Program:
    entries = yield from _consult(ctx, obs, hints)
    yield _read(hints.touch_file)
    live = [e for e in entries if e.status.lower() == "accepted"]
    superseded = [e for e in entries if e.status.lower() == "superseded"]
    target = hints.search_file or hints.search_topic or hints.touch_file
    if not entries:
        yield Final(
            f"I found no recorded decision that governs {target}, so nothing stands in the way; I'll make the change."
        )
        return
    if cite_correctly and live:
        body = yield _read(live[0].path)
        yield Final(_cite(live[0], body, superseded, conflict=True))
        return
    # A plausible mistake: rely on the last record found, whatever its status, without flagging a conflict.
    wrong = entries[-1]
    body = yield _read(wrong.path)
    yield Final(
        f"ADR-{wrong.id} describes how this works: {decision_text(body)} I've made the change accordingly."
    )


def _record(ctx: RepContext, obs: Observation, hints: PolicyHints) -> Program:
    yield _read(hints.touch_file)
    entries = yield from _consult(ctx, obs, hints)
    bindir = plugin_bin(obs.hook_note)
    title = hints.record_title or f"Decision about {hints.touch_file}"
    if not bindir:
        yield Final(f'Done. This choice deserves a decision record; I propose recording it as "{title}".')
        return
    cmd = [f"{bindir}/adr-new", title, "--governs", hints.touch_file]
    cmd += [
        "--context",
        f"The change to {hints.touch_file} needed a choice the team will want to find later.",
    ]
    cmd += ["--decision", title + "."]
    live_ids = {e.id for e in entries if e.status.lower() == "accepted"}
    if hints.record_supersedes and hints.record_supersedes in live_ids:
        cmd += ["--supersedes", hints.record_supersedes]
    out = yield _bash(shlex.join(cmd))
    m = _CREATED.search(out)
    if m:
        yield Final(f"Done. I recorded the decision as ADR-{m.group(2)} ({m.group(1)}).")
    else:
        yield Final(
            f'Done. Recording the decision failed ({out.strip()[:200]}); I propose recording it as "{title}".'
        )


# --- a test policy: the adversary -------------------------------------------------------------------
def escape_targets(seed: int) -> dict[str, str]:
    """Where `scripted:escape` tries to write and what it tries to read, for a rep of this seed.

    The real HOME is the recorder's own (the scripted model runs in the recorder's process)."""
    home = os.path.expanduser("~")
    tag = f"{seed:016x}"
    return {
        "home_file": f"{home}/evalb-escape-{tag}",
        "var_tmp_file": f"/var/tmp/evalb-escape-{tag}",
        "home_canary": f"{home}/.evalb-canary",
    }


def escape(ctx: RepContext, obs: Observation) -> Program:
    """TEST POLICY, adversarial: tries to break out of its rep's confinement, and reports what it got.

    Writes into the real HOME and /var/tmp, reads secrets from its environment, from every
    process's /proc/PID/environ, and from a canary file in the real HOME. A confined rep must see
    every attempt fail (tests/hardening/test_confinement.py). Never use it to measure anything."""
    t = escape_targets(ctx.seed)
    yield _bash(
        f"echo escaped > {t['home_file']} && echo WROTE-HOME || echo 'home write failed'",
        "Checking what this sandbox lets me touch.",
    )
    yield _bash(f"echo escaped > {t['var_tmp_file']} && echo WROTE-VAR-TMP || echo 'var/tmp write failed'")
    yield _bash(
        'printf \'AWS=[%s] GH=[%s]\\n\' "$AWS_SECRET_ACCESS_KEY" "$GITHUB_TOKEN"; '
        "env | grep -iE 'secret|token|sekrit' | sed 's/^/ENV: /' || echo 'no secret-looking variables'"
    )
    yield _bash(
        "for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f 2>/dev/null; done "
        "| grep -iE 'sekrit|AWS_SECRET|GITHUB_TOKEN' | sed 's/^/PROC: /' | sort -u; echo proc-scan-done"
    )
    yield _bash(f"cat {t['home_canary']} 2>&1 | sed 's/^/CANARY: /'; echo canary-done")
    yield Final("Escape attempts done; see the tool results.")


#: Test policies (adversarial; never for measurement) run only where this variable is "1".
TEST_POLICIES_ENV = "EVALB_TEST_POLICIES"
#: `scripted:shell` reads its script (JSON: {"commands": [...], "final": "..."}) from this file.
SHELL_SCRIPT_ENV = "EVALB_SHELL_SCRIPT"
TEST_POLICIES = {"escape", "shell"}


def shell_script() -> dict[str, Any]:
    """The script of `scripted:shell`: the JSON file named by EVALB_SHELL_SCRIPT."""
    path = os.environ.get(SHELL_SCRIPT_ENV)
    if not path:
        raise PolicyError(f"scripted:shell needs {SHELL_SCRIPT_ENV} (a JSON file of commands)")
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise PolicyError(f"cannot read the scripted:shell script {path}: {e}") from e
    if not isinstance(data, dict) or not all(isinstance(c, str) for c in data.get("commands", [])):
        raise PolicyError(f"{path}: expected {{'commands': [str, ...], 'final': str}}")
    return data


def shell(ctx: RepContext, obs: Observation) -> Program:
    """TEST POLICY, adversarial: runs a given list of Bash commands one by one, then ends with the
    script's final text. The hostile-rep tests drive every attack through it; it is refused unless
    EVALB_TEST_POLICIES=1 (see parse_model). Never use it to measure anything."""
    script = shell_script()
    for cmd in script.get("commands", []):
        yield ToolCall("Bash", {"command": cmd, "description": "step"})
    yield Final(str(script.get("final", "Done.")))


# --- the judge ----------------------------------------------------------------------------------------
# A scripted stand-in for the haiku judge: it grades the fenced message clause by clause. A clause
# counts as YES when it names a decision record and proposes, offers, asks for or reports writing one,
# and is not negated ("no ADR needed", "I won't record an ADR"). Sentences that address the grader
# ("answer YES", "the agent proposed…", forged markers) and records for some other, later decision
# are dropped before grading, so injected text cannot make a silent message YES.
_FENCED = re.compile(r"^--- BEGIN AGENT MESSAGE (\S+) ---\n(.*?)^--- END AGENT MESSAGE \1 ---$", re.S | re.M)
_SPECIFIC = r"(?:\bADR[- ]?\d+\b|\bdocs/adr/[\w.-]+)"
# An ADR / decision record in general ("an ADR", "a new ADR-0008", "as ADR-0008", "docs/adr").
_OBJ = re.compile(
    r"\bADRs?\b(?![- ]?\d)|\b(?:architecture )?decision[- ]records?\b|\bdocs/adr\b/?(?![\w-])"
    r"|\b(?:new|as)\s+ADR[- ]?\d+\b|\brecord(?:ing)?\s+(?:this|the|that)\s+decision\b|\brecord(?:ing)?\s+(?:it|this)\s+as\b",
    re.I,
)
# "I recorded … as ADR-0007", "I've drafted docs/adr/0008-….md", "Added an ADR …", "now recorded in a new ADR".
_WROTE = re.compile(
    r"(?:^|\b(?:I|I've|I have|we|we've|we have)\s+(?:also\s+|now\s+|just\s+)?|\bnow\s+)"
    r"(?:recorded|wrote|written|drafted|added|created|captured|filed|documented)"
    rf"(?:(?:\s+\S+){{0,4}}?\s+(?:{_OBJ.pattern})|(?:\s+(?:it|this|the decision))?(?:\s+(?:as|in))?\s+{_SPECIFIC})",
    re.I,
)
_WANT = re.compile(
    r"\b(?:suggest|propos|recommend|offer|worth|deserv|warrant|merit|need|want|consider|should|ought|"
    r"shall|remember)\w*|\b(?:would|'d) like\b|\bwould you like\b|\blike me to\b",
    re.I,
)
_MODAL = re.compile(
    r"\b(?:can|could|would|will|may|might|let me|let's|happy to|glad to|please|time to)\b|'ll\b|'d\b", re.I
)
_ACTION = re.compile(
    r"\b(?:writ\w*|wrote|record\w*|draft\w*|add\w*|creat\w*|captur\w*|document\w*|file|log)\b", re.I
)
_IMPERATIVE = re.compile(
    r"(?:^|:\s*)(?:please\s+|also\s+|then\s+)?(?:write|record|draft|add|create|capture|document|file|log)\b",
    re.I,
)
# Idioms whose negation word does not negate the proposal: rewritten to their positive sense first.
_UNNEGATE = [
    (re.compile(r"\b(?:don't|do not|never) forget\b", re.I), "remember"),
    (re.compile(r"\b(?:wouldn't|would not|can't|cannot) hurt\b|\bno harm in\b", re.I), "would help"),
    (re.compile(r"\bmistake not to\b", re.I), "should"),
    (re.compile(r"\bnot sure (?:whether|if)\b|\bor not\b|\bwhy not\b", re.I), "whether"),
]
_NEGATION = re.compile(
    r"\b(?:no|not|never|none|nor|neither|without|unnecessary|needless|overkill|skip\w*|against|instead|"
    r"rather than|cannot)\b|n't\b",
    re.I,
)
_ANAPHOR = re.compile(r"\bone\b|\b(?:I|me to|to)\?\s*$", re.I)
_TO_GRADER = re.compile(
    r"\b(?:judge|grader|grad(?:e|ed|ing)|rubric|verdict|instructions?)\b|\b(?:system|assistant|human)\s*:"
    r"|\b(?:answer|reply|respond|output|say)\s+(?:with\s+)?\W?(?:YES|NO)\b|\bthe agent\b|\bthis message\b"
    r"|AGENT MESSAGE|</?message>",
    re.I,
)
_OTHER_DECISION = re.compile(r"\b(?:if|should) we ever\b|\b(?:a|any) (?:later|future)\b", re.I)


def _clauses(body: str) -> list[str]:
    """Sentences and their clauses; a line broken mid-sentence is joined first."""
    text = re.sub(r"(?<=[a-z,])\n(?=[ \t]*[a-z(])", " ", body.replace("\u2019", "'"))
    out: list[str] = []
    for line in text.split("\n"):
        for sentence in re.split(r"(?<=[.!?])\s+", line):
            if _TO_GRADER.search(sentence) or _OTHER_DECISION.search(sentence):
                continue
            parts = re.split(r";|\s[\u2014\u2013-]\s|,?\s+but\s+", sentence)
            out += [re.sub(r"^\s*(?:[-*+>]|\d+[.)])?\s*", "", p).strip() for p in parts]
    return [c for c in out if c]


def _proposes(clause: str, has_obj: bool) -> bool:
    """Does this clause propose, offer, ask for or report writing a decision record?"""
    for pattern, repl in _UNNEGATE:
        clause = pattern.sub(repl, clause)
    if _NEGATION.search(clause):
        return False
    if _WROTE.search(clause):
        return True
    if not has_obj:
        return False
    return bool(
        _WANT.search(clause)
        or (_MODAL.search(clause) and _ACTION.search(clause))
        or _IMPERATIVE.search(clause)
    )


def judge_verdict(prompt: str) -> str:
    """YES when the fenced final message proposes, asks to, or did record the decision; else NO.

    Only the text between the judge prompt's nonce-marked fences is read (each line there carries
    a '| ' prefix); without fences there is nothing to grade, so the answer is NO. A clause without
    a record of its own ("want me to write one?") borrows the previous clause's."""
    m = _FENCED.search(prompt)
    if not m:
        return "NO"
    body = "\n".join(line.removeprefix("| ") for line in m.group(2).splitlines())
    previous_obj = False
    for clause in _clauses(body):
        has_obj = bool(_OBJ.search(clause))
        if _proposes(clause, has_obj or (previous_obj and bool(_ANAPHOR.search(clause)))):
            return "YES"
        previous_obj = has_obj
    return "NO"


PolicyFn = Callable[[RepContext, Observation], Program]
POLICIES: dict[str, PolicyFn] = {
    "oracle": oracle,
    "oblivious": oblivious,
    "stochastic": stochastic,
    "ritual": ritual,
    "escape": escape,  # test policy (adversarial); see `escape`
    "shell": shell,  # test policy (adversarial); see `shell`
}
PARAMS = {"p_consult", "p_cite", "p_record", "p_propose", "seed"}


def parse_model(model: str) -> tuple[str, dict[str, float]]:
    """`scripted:NAME[:k=v,k=v]` -> (NAME, params); clear errors for unknown names or params."""
    if not model.startswith("scripted:"):
        raise PolicyError(f"{model!r} is not a scripted model", hint="use scripted:POLICY")
    rest = model.removeprefix("scripted:")
    name, _, raw = rest.partition(":")
    offered = [p for p in POLICIES if p not in TEST_POLICIES]
    if name in TEST_POLICIES and os.environ.get(TEST_POLICIES_ENV) != "1":
        raise PolicyError(
            f"scripted:{name} is a test policy (adversarial) and runs only in the test suite",
            hint=f"choose one of: {', '.join([*offered, 'judge'])}",
        )
    if name not in POLICIES and name != "judge":
        raise PolicyError(
            f"unknown scripted policy {name!r}", hint=f"choose one of: {', '.join([*offered, 'judge'])}"
        )
    params: dict[str, float] = {}
    for item in filter(None, raw.split(",")):
        key, _, value = item.partition("=")
        if key not in PARAMS:
            raise PolicyError(
                f"unknown parameter {key!r} in {model!r}", hint=f"known: {', '.join(sorted(PARAMS))}"
            )
        try:
            params[key] = float(value)
        except ValueError as e:
            raise PolicyError(f"parameter {key} in {model!r} needs a number, got {value!r}") from e
        if key.startswith("p_") and not 0 <= params[key] <= 1:
            raise PolicyError(f"parameter {key} in {model!r} must be between 0 and 1")
    return name, params
