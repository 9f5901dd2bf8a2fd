"""A rep is hostile input: what a confined agent can reach, and what happens when it hits a limit.

Every test records real reps with the real client; the agent is the test-only `scripted:shell`
policy, which runs the given Bash commands inside the rep. Assertions are on the archived tool
results (what the agent saw) and the committed run rows. The scenario file is never printed: the
commands only test whether it can be read, and assertions never show tool results in full.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import time
import uuid
from pathlib import Path

import polars as pl
import pytest

from evalb import paths
from evalb.archive import Archive
from runner.credproxy import DUMMY_KEY
from runner.environment import SCRIPTED_KEY
from runner.grid import expand, plugin_hash_of, run_grid
from runner.limits import Limits
from runner.record import RecordOptions
from runner.scripted import server as server_mod
from tests.hardening.helpers import check_archive, procs_with, shell_script

pytestmark = pytest.mark.client
MODEL = "scripted:shell"


def _grid(root: Path, tmp: Path, commands: list[str], monkeypatch: pytest.MonkeyPatch, *, reps: int = 1,
          **options: object) -> pl.DataFrame:  # fmt: skip
    """Record `reps` reps of R1 whose agent runs `commands`; the grid must finish by itself."""
    monkeypatch.setenv("EVALB_SHELL_SCRIPT", str(shell_script(tmp, commands)))
    opts = RecordOptions(**{"timeout": 120, **options})  # type: ignore[arg-type]
    slots = expand(["R1"], [MODEL], reps, plugin_hash_of(opts.plugin_dir))
    run_grid(slots, Archive(root), opts, jobs=1, retries=0, progress_stream=None)
    return check_archive(root).sort("rep")


def _results(root: Path) -> list[str]:
    """The text of each archived tool result, in order (what the agent's commands printed)."""
    ev = pl.read_parquet(str(root / "events" / "*.parquet")).sort("run_id", "seq", "block_index")
    return [t or "" for t in ev.filter(pl.col("block_type") == "tool_result")["text"]]


def _opts(row: dict[str, object]) -> dict[str, object]:
    return json.loads(str(row["options_json"]))


def _rerun_records_nothing_and_a_clean_rep_completes(
    root: Path, tmp: Path, monkeypatch: pytest.MonkeyPatch, reps: int, **options: object
) -> None:
    before = _grid(root, tmp, ["true"], monkeypatch, reps=reps, **options).height
    assert before == reps, "a rerun recorded a slot that was already filled"
    clean = _grid(tmp / "clean", tmp, ["echo clean-rep"], monkeypatch, **options)
    assert clean["outcome"].to_list() == ["completed"]


def test_confined_rep_sees_no_project_archive_home_or_other_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "archive"
    canary = Path("/root") / f"evalb-canary-{uuid.uuid4().hex}"
    canary.write_text("sekrit-in-root\n")
    other = Path(tempfile.mkdtemp(prefix="evalb-R2-", dir="/tmp"))
    (other / "sandbox").mkdir()
    (other / "sandbox" / "notes.txt").write_text("other-sandbox-canary\n")
    seen_keys: list[str | None] = []
    real_post = server_mod._Handler.do_POST

    def spy(self: server_mod._Handler) -> None:  # records the key the model server received
        seen_keys.append(self.headers.get("x-api-key"))
        real_post(self)

    monkeypatch.setattr(server_mod._Handler, "do_POST", spy)
    repo, scen = paths.REPO_ROOT.resolve(), paths.SCENARIOS_DIR.resolve()
    commands = [
        # the answer key: only whether it can be read, never its text
        f"cat {scen}/R1.md >/dev/null 2>&1 && echo SCENARIO-READABLE; cat {scen}/R1.md 2>&1 | grep -o 'No such file'",
        f"ls {scen} >/dev/null 2>&1 && echo SCENARIO-DIR-LISTED; echo scen-done",
        f"ls {root} 2>&1; echo archive-rc=$?",
        f"cat {repo}/README.md >/dev/null 2>&1 && echo README-READABLE; echo readme-done",
        f"ls -A {repo} | tr '\\n' ' '; echo",
        f"cat {canary} 2>&1; ls -A /root | tr '\\n' ' '; echo",
        f"cat {other}/sandbox/notes.txt 2>&1; ls /tmp | tr '\\n' ' '; echo",
        "echo KEY=$ANTHROPIC_API_KEY; env | grep -ci -e secret -e token; echo env-done",
        "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -E '^ANTHROPIC_(API_KEY|BASE_URL)=' | sort -u",
        "ls /etc/shadow /var /run /home /srv 2>&1 | grep -c 'No such file'",
        "touch /escape /root/escape /etc/escape /usr/escape 2>&1 | grep -c 'Read-only file system'",
    ]
    try:
        df = _grid(root, tmp_path, commands, monkeypatch)
    finally:
        canary.unlink(missing_ok=True)
        shutil.rmtree(other, ignore_errors=True)
    row = df.row(0, named=True)
    assert row["outcome"] == "completed" and row["confinement"] == "bwrap"
    assert _opts(row)["credential_mode"] == "proxy"
    r = _results(root)
    assert len(r) == len(commands)
    scenario_readable = "SCENARIO-READABLE" in r[0] or "SCENARIO-DIR-LISTED" in r[1]
    assert not scenario_readable, "the scenario file (answer key) is readable from inside a rep"
    assert r[0].strip() == "No such file"
    assert "No such file" in r[2] and "archive-rc=2" in r[2]
    assert "README-READABLE" not in r[3] and "readme-done" in r[3]
    # of the checkout, exactly the client install (.tools) and the plugin (fixture) show
    assert r[4].split() == [".tools", "fixture"]
    assert "sekrit-in-root" not in r[5] and "No such file" in r[5]
    assert canary.name not in r[5].splitlines()[-1]  # `ls -A /root`: only toolchains on PATH
    assert set(r[5].splitlines()[-1].split()) <= {".cargo", ".pyenv", ".local", ".rbenv", ".nvm"}
    assert "other-sandbox-canary" not in r[6] and "No such file" in r[6]
    assert other.name not in r[6].splitlines()[-1]  # `ls /tmp`: the rep's own work dir only
    assert f"KEY={DUMMY_KEY}" in r[7] and "\n0\n" in f"\n{r[7]}"
    env_lines = set(r[8].split())
    assert f"ANTHROPIC_API_KEY={DUMMY_KEY}" in env_lines
    assert all(
        line.startswith(("ANTHROPIC_API_KEY=evalb", "ANTHROPIC_BASE_URL=http://127.0.0.1:"))
        for line in env_lines
    )
    assert all("/r/" not in line for line in env_lines), "the scripted model's per-rep URL leaked"
    assert SCRIPTED_KEY not in "".join(r)
    assert r[9].strip() == "5"
    assert r[10].strip() == "4"  # nothing but the sandbox, HOME and /tmp is writable
    # the upstream got the real key from the proxy, never the dummy
    assert seen_keys and set(seen_keys) == {SCRIPTED_KEY}


def test_tmp_fill_stops_at_the_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "archive"
    started = time.monotonic()
    df = _grid(
        root, tmp_path, ["dd if=/dev/zero of=/tmp/fill bs=1M count=64 2>&1 | tail -2; du -m /tmp/fill"],
        monkeypatch, reps=2, limits=Limits(tmp=16 << 20),
    )  # fmt: skip
    elapsed = time.monotonic() - started
    assert df["outcome"].to_list() == ["resource_limit"] * 2
    assert set(df["outcome_detail"]) == {"/tmp limit (16 MiB) reached: the private /tmp filled up"}
    r = _results(root)
    # the client keeps the Bash tool's output under /tmp too: it says the output was lost (ENOSPC)
    assert len(r) == 2 and all("No space left on device" in t or "ENOSPC" in t for t in r)
    assert [_opts(row)["limits_peak"]["tmp"] for row in df.iter_rows(named=True)] == [16 << 20] * 2  # type: ignore[index]
    print(f"2 reps filling a 16 MiB /tmp: {elapsed:.1f} s")
    _rerun_records_nothing_and_a_clean_rep_completes(
        root, tmp_path, monkeypatch, 2, limits=Limits(tmp=16 << 20)
    )


def test_memory_past_the_limit_is_a_resource_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "archive"
    lim = Limits(memory=1 << 30)
    df = _grid(
        root, tmp_path, ["python3 -c 'x = bytearray(3 << 30); print(len(x))'; echo rc=$?"],
        monkeypatch, limits=lim,
    )  # fmt: skip
    row = df.row(0, named=True)
    assert row["outcome"] == "resource_limit", row["outcome_detail"]
    assert row["outcome_detail"].startswith("memory limit (1 GiB) reached")
    assert _opts(row)["limits_enforced"]["memory"] == "1 GiB (cgroup v1)"  # type: ignore[index]
    r = _results(root)
    assert "3221225472" not in r[0] and ("rc=137" in r[0] or "Killed" in r[0] or "MemoryError" in r[0])
    # scored INVALID with the limit as the reason: never the model's FAIL
    from analysis.checker import score_archive

    scored = score_archive(root, write=False).scores.row(0, named=True)
    assert scored["verdict"] == "INVALID" and not scored["valid"]
    assert "resource_limit: memory limit (1 GiB) reached" in str(scored["reasons"])
    _rerun_records_nothing_and_a_clean_rep_completes(root, tmp_path, monkeypatch, 1, limits=lim)


def test_fork_loop_is_bounded_by_the_process_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "archive"
    lim = Limits(pids=128)
    loop = (
        'python3 -c "import subprocess as s\nps = []\nfor i in range(2000):\n'
        "    try: ps.append(s.Popen(['sleep', '30'], stdout=s.DEVNULL, stderr=s.DEVNULL))\n"
        "    except OSError as e: print('refused after', i, type(e).__name__); break\n"
        '[p.kill() for p in ps]"'
    )
    df = _grid(root, tmp_path, [loop], monkeypatch, limits=lim)
    row = df.row(0, named=True)
    assert row["outcome"] == "resource_limit", row["outcome_detail"]
    assert row["outcome_detail"] == "process limit (128) reached: a fork was refused"
    r = _results(root)
    assert "refused after" in r[0]
    assert int(r[0].split("refused after")[1].split()[0]) < 128
    assert _opts(row)["limits_peak"]["pids"] <= 128  # type: ignore[index]
    _rerun_records_nothing_and_a_clean_rep_completes(root, tmp_path, monkeypatch, 1, limits=lim)


def test_file_past_the_size_limit_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "archive"
    lim = Limits(file_size=1 << 20)
    df = _grid(
        root, tmp_path, ["dd if=/dev/zero of=big.bin bs=1M count=8 2>&1 | tail -1; echo rc=$?; stat -c %s big.bin"],
        monkeypatch, limits=lim,
    )  # fmt: skip
    row = df.row(0, named=True)
    assert row["outcome"] == "resource_limit", row["outcome_detail"]
    assert row["outcome_detail"] == "file size limit (1 MiB) reached: big.bin stopped at the cap"
    r = _results(root)
    assert r[0].split()[-1] == str(1 << 20)
    _rerun_records_nothing_and_a_clean_rep_completes(root, tmp_path, monkeypatch, 1, limits=lim)


def test_unconfined_rep_leaves_no_process_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "archive"
    marker = f"6{uuid.uuid4().int % 10**5:05d}"  # a sleep length no other process uses
    df = _grid(
        root, tmp_path, [f"setsid sleep {marker} >/dev/null 2>&1 < /dev/null & echo started"],
        monkeypatch, confine=False,
    )  # fmt: skip
    row = df.row(0, named=True)
    assert row["outcome"] == "completed" and row["confinement"] == "none (opted out)"
    assert _opts(row)["processes_killed_at_end"] >= 1  # type: ignore[operator]
    assert procs_with(f"sleep {marker}") == []
    assert os.path.isdir("/proc/self")  # the check above looked at a real /proc
    _rerun_records_nothing_and_a_clean_rep_completes(root, tmp_path, monkeypatch, 1, confine=False)


def test_api_only_network_reaches_the_model_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--network api-only: the rep completes through the proxy's unix socket; no name resolution,
    no route out, and not even the host's loopback (where the model server and the TCP proxies
    listen) is reachable."""
    root = tmp_path / "archive"
    probe = (
        "python3 -c \"import socket,sys\nfor a in [('127.0.0.1', int(sys.argv[1]))]:\n"
        "    try: socket.create_connection(a, timeout=3); print('CONNECTED', a)\n"
        "    except OSError as e: print('refused', a[1], type(e).__name__)\" "
    )
    listener = socket.create_server(("127.0.0.1", 0))  # a service on the host's loopback
    port = listener.getsockname()[1]
    df = _grid(
        root, tmp_path,
        ["getent hosts example.com || echo no-dns", "cat /proc/net/dev | tail -n +3 | cut -d: -f1; tail -n +2 /proc/net/route | wc -l",
         f"{probe} {port}", "echo KEY=$ANTHROPIC_API_KEY"],
        monkeypatch, network="api-only",
    )  # fmt: skip
    listener.close()
    row = df.row(0, named=True)
    assert row["outcome"] == "completed" and row["confinement"] == "bwrap (no network)", row["outcome_detail"]
    assert _opts(row)["network"] == "api-only" and _opts(row)["credential_mode"] == "proxy"
    r = _results(root)
    assert "no-dns" in r[0]
    assert r[1].split() == ["lo", "0"]  # only the loopback, and no route anywhere
    assert "CONNECTED" not in r[2] and r[2].count("refused") == 1
    assert f"KEY={DUMMY_KEY}" in r[3]
