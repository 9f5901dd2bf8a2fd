"""`evalb-scripted-judge`: the judge command backed by the scripted model, through the real client.

Reads the judge prompt on stdin and prints YES or NO, like any `ADR_EVAL_B_JUDGE_CMD`; the answer
comes from `claude -p --model scripted:judge` talking to a loopback scripted model, so the demo
and the tests exercise the same path a real judge (haiku) takes, with no API key.
Exit codes: 0 the answer is YES or NO; 1 it is neither; 2 no prompt on stdin (a terminal, or empty);
3 the client failed.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import typer

from cli.app import new_app, run_app
from evalb.errors import HarnessError, UsageError


def judge(prompt: str, client: Path | None = None) -> str:
    """The scripted judge's verdict for `prompt` (YES / NO), obtained through the real client."""
    from analysis.judge import ClaudeJudge
    from runner.environment import client_env
    from runner.scripted.policies import RepContext
    from runner.scripted.server import ModelServer

    with ModelServer() as server, tempfile.TemporaryDirectory(prefix="evalb-judge-home-") as home:
        url = server.register(RepContext(variant="judge", kind="judge", hints=None, policy="judge"))
        env, _ = client_env(Path(home), base_url=url)
        return ClaudeJudge("scripted:judge", client, env=env).ask(prompt).strip()


app = new_app(
    "The judge command backed by the scripted model: the prompt on stdin, YES or NO on stdout.",
    no_args_is_help=False,
)


@app.command()
def scripted_judge() -> None:
    """Read the judge prompt on stdin; print YES or NO (the scripted judge, through the real client)."""
    if sys.stdin.isatty():
        raise UsageError(
            "the judge prompt is read on stdin", hint="pipe it in: evalb-scripted-judge < prompt.txt"
        )
    prompt = sys.stdin.read()
    if not prompt.strip():
        raise UsageError("the judge prompt on stdin is empty", hint="pipe the prompt in")
    from analysis.judge import JudgeFailed

    try:
        answer = judge(prompt)
    except JudgeFailed as e:
        raise HarnessError(f"the scripted judge's client failed: {e}") from e
    typer.echo(answer)
    raise typer.Exit(0 if answer in ("YES", "NO") else 1)


def main() -> None:
    run_app(app, "evalb-scripted-judge")
