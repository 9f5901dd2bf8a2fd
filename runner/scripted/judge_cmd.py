"""`evalb-scripted-judge`: the judge command backed by the scripted model, through the real client.

Reads the judge prompt on stdin and prints YES or NO, like any `ADR_EVAL_B_JUDGE_CMD`; the answer
comes from `claude -p --model scripted:judge` talking to a loopback scripted model, so the demo
and the tests exercise the same path a real judge (haiku) takes, with no API key.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from analysis.judge import ClaudeJudge, JudgeFailed
from runner.environment import client_env
from runner.scripted.policies import RepContext
from runner.scripted.server import ModelServer


def judge(prompt: str, client: Path | None = None) -> str:
    """The scripted judge's verdict for `prompt` (YES / NO), obtained through the real client."""
    with ModelServer() as server, tempfile.TemporaryDirectory(prefix="evalb-judge-home-") as home:
        url = server.register(RepContext(variant="judge", kind="judge", hints=None, policy="judge"))
        env, _ = client_env(Path(home), base_url=url)
        return ClaudeJudge("scripted:judge", client, env=env).ask(prompt).strip()


def main() -> None:
    try:
        answer = judge(sys.stdin.read())
    except JudgeFailed as e:
        print(f"error: the scripted judge's client failed: {e}", file=sys.stderr)
        sys.exit(1)
    print(answer)
    sys.exit(0 if answer in ("YES", "NO") else 1)
