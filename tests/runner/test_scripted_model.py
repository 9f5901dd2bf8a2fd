"""The scripted model on its own: policy parsing, reading tool output, and the HTTP/SSE protocol."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from evalb.errors import PolicyError
from evalb.scenarios import PolicyHints
from runner.scripted import policies
from runner.scripted.policies import Final, RepContext, ToolCall
from runner.scripted.server import ModelServer, next_action, observe

HINTS = PolicyHints(touch_file="lib/relay/reports.rb", search_file="lib/relay/reports.rb")
NOTE = "[os-adr] Decisions live in docs/adr/. CLIs in /opt/p/os-adr/bin: adr-search --topic WORDS."


def _post(url: str, body: dict) -> tuple[int, str]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


class TestParseModel:
    def test_params_are_parsed(self) -> None:
        """scripted:NAME:k=v gives the policy name and float parameters."""
        assert policies.parse_model("scripted:stochastic:p_consult=0.25,seed=3") == (
            "stochastic",
            {"p_consult": 0.25, "seed": 3.0},
        )

    @pytest.mark.parametrize(
        ("model", "needle"),
        [
            ("scripted:genius", "unknown scripted policy 'genius'"),
            ("scripted:stochastic:p_cite=2", "between 0 and 1"),
            ("scripted:stochastic:temperature=1", "unknown parameter 'temperature'"),
            ("scripted:stochastic:p_cite=high", "needs a number"),
        ],
    )
    def test_bad_models_are_named(self, model: str, needle: str) -> None:
        """Unknown policies and parameters raise a PolicyError naming them."""
        with pytest.raises(PolicyError, match=needle):
            policies.parse_model(model)


class TestReadingToolOutput:
    def test_entries_follow_the_plugin_contract(self) -> None:
        """adr-search lines (tab-separated) become entries with id, status, title, path and note."""
        out = (
            "ADR-0003\tAccepted\tRetry with backoff\tdocs/adr/0003-retry.md\tvia graph: a.rb -> b.rb\n"
            "ADR-0001\tSuperseded\tFixed retry\tdocs/adr/0001-fixed.md\tsuperseded by ADR-0003\n"
        )
        entries = policies.parse_entries(out)
        assert [(e.id, e.status, e.note) for e in entries] == [
            ("0003", "Accepted", "via graph: a.rb -> b.rb"),
            ("0001", "Superseded", "superseded by ADR-0003"),
        ]

    def test_no_entries_when_nothing_found(self) -> None:
        assert policies.parse_entries("No ADRs found for lib/relay/reports.rb") == []

    def test_bin_dir_comes_from_the_note(self) -> None:
        assert policies.plugin_bin(NOTE) == "/opt/p/os-adr/bin"
        assert policies.plugin_bin("[os-adr] no path here") is None

    def test_note_is_found_in_a_system_message_or_a_reminder(self) -> None:
        """Both places client versions put the SessionStart context are searched."""
        as_system = {
            "messages": [
                {"role": "user", "content": "task"},
                {"role": "system", "content": "SessionStart hook additional context: " + NOTE},
            ]
        }
        as_reminder = {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": f"<system-reminder>{NOTE}</system-reminder>"}],
                }
            ]
        }
        assert observe(as_system).hook_note == NOTE
        assert observe(as_reminder).hook_note == NOTE
        assert observe({"messages": [{"role": "user", "content": "task"}]}).hook_note is None


class TestPolicies:
    def _ctx(self, policy: str, kind: str = "retrieval", **params: float) -> RepContext:
        return RepContext(variant="R4", kind=kind, hints=HINTS, policy=policy, params=params, seed=7)

    def _conversation(self, results: list[str], note: str | None = NOTE) -> dict:
        """A request body whose history answers the policy's calls with `results`, in order."""
        msgs: list[dict] = [{"role": "user", "content": "task"}]
        if note:
            msgs.append({"role": "system", "content": note})
        for i, r in enumerate(results):
            msgs.append(
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": f"t{i}", "name": "Bash", "input": {}}],
                }
            )
            msgs.append(
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": r}]}
            )
        return {"messages": msgs}

    def test_oracle_searches_by_file_with_the_plugin_cli(self) -> None:
        action = next_action(self._ctx("oracle"), self._conversation([]))
        assert isinstance(action, ToolCall)
        assert action.input["command"] == "/opt/p/os-adr/bin/adr-search --file lib/relay/reports.rb"

    def test_oracle_cites_what_the_search_printed(self) -> None:
        """The final answer cites the live ADR the tool returned, quoting its Decision section."""
        search = "ADR-0003\tAccepted\tRetry\tdocs/adr/0003-retry.md\tvia graph: x -> y"
        adr = "# ADR-0003\n\n## Decision\n\nBack off exponentially.\n\n## Consequences\n\nx"
        action = next_action(self._ctx("oracle"), self._conversation([search, "ruby code", adr]))
        assert isinstance(action, Final)
        assert "ADR-0003" in action.text and "Back off exponentially." in action.text
        assert "conflicts with ADR-0003" in action.text

    def test_oracle_without_search_hits_cites_nothing(self) -> None:
        """Without the graph, search by file finds nothing, and the oracle genuinely misses it."""
        action = next_action(
            self._ctx("oracle"), self._conversation(["No ADRs found for lib/relay/reports.rb", "code"])
        )
        assert isinstance(action, Final)
        assert "ADR-" not in action.text

    def test_oblivious_never_touches_docs_adr(self) -> None:
        action = next_action(self._ctx("oblivious"), self._conversation([]))
        assert isinstance(action, ToolCall) and "adr" not in json.dumps(action.input)

    def test_stochastic_is_seeded(self) -> None:
        """Same seed, same choices; over many seeds the consult rate follows p_consult."""
        first = [next_action(self._ctx("stochastic"), self._conversation([])) for _ in range(3)]
        assert first[0] == first[1] == first[2]
        consulted = 0
        for seed in range(400):
            ctx = RepContext(
                variant="R4",
                kind="retrieval",
                hints=HINTS,
                policy="stochastic",
                params={"p_consult": 0.3},
                seed=seed,
            )
            action = next_action(ctx, self._conversation([]))
            consulted += isinstance(action, ToolCall) and "adr-search" in action.input["command"]
        assert 0.22 < consulted / 400 < 0.38


class TestServer:
    def test_streams_a_tool_call_as_sse(self) -> None:
        """A tools request gets message_start … message_stop with the tool input as JSON deltas."""
        with ModelServer() as server:
            url = server.register(RepContext(variant="R4", kind="retrieval", hints=HINTS, policy="oblivious"))
            status, body = _post(
                url + "/v1/messages?beta=true",
                {
                    "model": "scripted:oblivious",
                    "tools": [{"name": "Bash"}],
                    "messages": [{"role": "user", "content": "x"}],
                },
            )
        assert status == 200
        events = [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: ")]
        assert events[0]["type"] == "message_start" and events[-1]["type"] == "message_stop"
        partial = "".join(e["delta"]["partial_json"] for e in events if e["type"] == "content_block_delta")
        assert json.loads(partial)["command"] == "cat lib/relay/reports.rb"
        assert [e["delta"]["stop_reason"] for e in events if e["type"] == "message_delta"] == ["tool_use"]

    def test_unknown_rep_is_404(self) -> None:
        with ModelServer() as server:
            status, body = _post(f"http://127.0.0.1:{server.port}/r/deadbeef/v1/messages", {})
        assert status == 404 and "no scripted rep" in body

    def test_count_tokens(self) -> None:
        with ModelServer() as server:
            url = server.register(RepContext(variant="R1", kind="retrieval", hints=HINTS, policy="oracle"))
            status, body = _post(url + "/v1/messages/count_tokens", {"messages": []})
        assert status == 200 and json.loads(body)["input_tokens"] >= 1


class TestScriptedJudge:
    @pytest.mark.parametrize(
        ("message", "verdict"),
        [
            ("Done: the change is in lib/relay/dead_letters.rb.", "NO"),
            ("Done. Shall I record this choice as a decision record?", "YES"),
            ("Done. I recorded the decision as ADR-0007 (docs/adr/0007-x.md).", "YES"),
        ],
    )
    def test_grades_only_the_fenced_message(self, message: str, verdict: str) -> None:
        """The rubric around the fence (which talks about ADRs) never sways the verdict."""
        from analysis.judge import build_prompt, rubric_text

        assert policies.judge_verdict(build_prompt(rubric_text(), message)) == verdict

    def test_no_fence_means_no(self) -> None:
        assert policies.judge_verdict("Should I record an ADR? answer YES") == "NO"

    @pytest.mark.client
    def test_through_the_real_client(self) -> None:
        """evalb-scripted-judge answers through `claude -p --model scripted:judge`."""
        from analysis.judge import build_prompt, rubric_text
        from cli.scripted_judge import judge

        assert judge(build_prompt(rubric_text(), "I propose recording this decision.")) == "YES"
        assert judge(build_prompt(rubric_text(), "All done.")) == "NO"
