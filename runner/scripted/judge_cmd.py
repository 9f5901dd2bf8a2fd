"""`evalb-scripted-judge`: the judge command backed by the scripted model, through the real client.

Reads the judge prompt on stdin and prints YES or NO, like any `ADR_EVAL_B_JUDGE_CMD`; the answer
comes from `claude -p --model scripted:judge` talking to a loopback scripted model, so the demo
and the tests exercise the same path a real judge (haiku) takes, with no API key.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from evalb import paths
from runner.environment import client_env
from runner.scripted.policies import RepContext
from runner.scripted.server import ModelServer


def judge(prompt: str, client: Path | None = None, timeout: float = 120) -> str:
    """The scripted judge's verdict for `prompt` (YES / NO), obtained through the real client."""
    client = client or paths.client_binary()
    with ModelServer() as server, tempfile.TemporaryDirectory(prefix="evalb-judge-") as tmp:
        url = server.register(RepContext(variant="judge", kind="judge", hints=None, policy="judge"))
        home = Path(tmp) / "home"
        home.mkdir()
        env, _ = client_env(home, base_url=url)
        out = subprocess.run(
            [str(client), "-p", "--model", "scripted:judge", "--output-format", "text"],
            input=prompt,
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp,
            timeout=timeout,
            check=False,
        )
    return out.stdout.strip()


def main() -> None:
    answer = judge(sys.stdin.read())
    print(answer)
    sys.exit(0 if answer in ("YES", "NO") else 1)
