"""Hostile bytes and hostile failures: whatever a rep prints, or however the harness fails around
it, the archive takes it (losslessly), stays readable, and never blocks the next recorder.

- real confined reps (the test-only `scripted:shell` policy) print a line of emoji the client cuts
  in the middle of a surrogate pair, NEL, U+2028/U+2029 and invalid UTF-8;
- a stream of raw bytes that are not UTF-8 goes through the real line reader into the archive;
- garbage and uncommittable files in inflight/ are quarantined with one warning;
- a fault injected into one rep's capture or commit is recorded on that rep (`harness_error`) while
  the rest of the grid completes; a rerun retries it;
- a rep that times out while the agent's tool runs is a scored `timeout`;
- --archive / --workdir inside the measured inputs are refused in one line.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import duckdb
import polars as pl
import pytest

from evalb import paths
from evalb.archive import Archive
from evalb.transcript import split_lines
from runner import client as client_mod
from runner.client import run_session
from tests.conftest import record_grid
from tests.hardening.helpers import check_archive, record_shell, recorder, run_recorder, runs, wait_for

SCORE = str(Path(".venv/bin/evalb-score").resolve())
EMOJI_CUT = "python3 -c \"import sys; sys.stdout.write('x' + '\\U0001F600'*20000)\""
ODD_BYTES = "printf 'nel:\\xc2\\x85:ls:\\xe2\\x80\\xa8:ps:\\xe2\\x80\\xa9:bad:\\xff\\xfe:end\\n'"


def _events(root: Path) -> pl.DataFrame:
    return pl.read_parquet(str(root / "events" / "*.parquet")).sort("run_id", "seq", "block_index")


def _raw_bytes(raw: str, encoding: str | None) -> bytes:
    return base64.b64decode(raw) if encoding == "base64" else raw.encode("utf-8")


def _score(root: Path) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(
        [SCORE, "--archive", str(root), "--tsv"], capture_output=True, text=True, timeout=300
    )
    assert res.returncode in (0, 1), res.stderr  # 0 all PASS, 1 some FAIL/INVALID; 2 = an error
    assert "Traceback" not in res.stderr
    return res


# --- hostile lines ---------------------------------------------------------------------------------
@pytest.mark.client
def test_cut_emoji_and_odd_characters_are_archived_losslessly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tool result the client cuts inside a surrogate pair (it writes a lone `\\ud83d` escape), and
    one with NEL, U+2028, U+2029 and invalid bytes: the rep commits `completed`; every line read
    off the client's stdout is in `raw` byte for byte, one seq per line."""
    seen: list[bytes] = []
    real_decode = client_mod.decode_line

    def spy(line: bytes) -> tuple[str, str | None]:
        seen.append(line)  # the bytes of each line as read off the client's stdout pipe
        return real_decode(line)

    monkeypatch.setattr(client_mod, "decode_line", spy)
    root = tmp_path / "archive"
    df = record_shell(root, tmp_path, [EMOJI_CUT, ODD_BYTES], monkeypatch=monkeypatch)
    check_archive(root)
    run = df.row(0, named=True)
    assert run["outcome"] == "completed", run["outcome_detail"]
    ev = _events(root)
    lines = [b for b in seen if b.strip()]
    assert run["n_lines"] == len(lines) == ev["seq"].n_unique()
    by_seq = ev.group_by("seq", maintain_order=True).agg(
        pl.col("raw").first(), pl.col("raw_encoding").first()
    )
    assert [_raw_bytes(r, e) for _, r, e in by_seq.rows()] == lines, "raw differs from the client's bytes"

    results = ev.filter(pl.col("block_type") == "tool_result")
    cut, odd = results.row(0, named=True), results.row(1, named=True)
    # the client wrote a lone high surrogate escape: raw keeps it, the parsed text has U+FFFD
    assert '\\ud83d"' in cut["raw"] or "\\ud83d\\n" in cut["raw"], cut["raw"][-400:]
    assert "\ufffd" in cut["text"] and "\U0001f600" in cut["text"]
    # NEL comes raw (and did not split the line), U+2028/9 escaped, invalid bytes as U+FFFD
    assert "\x85" in odd["raw"] and "\\u2028" in odd["raw"]
    assert odd["text"].startswith("nel:\x85:ls:\u2028:ps:\u2029:bad:")
    assert not ev["malformed"].any()
    # plain DuckDB reads it; evalb-score scores it
    con = duckdb.connect()
    n = con.execute(
        f"SELECT count(*) FROM read_parquet('{root}/events/*.parquet') WHERE text LIKE '%\ufffd%'"
    )
    assert n.fetchone() == (2,)
    assert len(_score(root).stdout.strip().splitlines()) == 1


def test_non_utf8_stdout_is_kept_as_base64(tmp_path: Path) -> None:
    """Bytes that are not UTF-8 go through the real line reader and journal into `raw` (base64,
    `raw_encoding`='base64') byte for byte; NEL and U+2028 never split a line, only b'\\n' does."""
    payload = (
        b'{"type":"system","subtype":"init","model":"m"}\n'
        b'\xff\xfe{"type":"user"}\n'
        b'{"type":"assistant","message":{"content":[{"type":"text","text":"a\xc2\x85b\xe2\x80\xa8c"}]}}\n'
        b'{"type":"user","message":{"content":[{"type":"tool_result","content":"\\ud83d x"}]}}\n'
        b"torn \xc3"
    )
    script = tmp_path / "bytes.bin"
    script.write_bytes(payload)
    archive = Archive(tmp_path / "archive")
    archive.ensure()
    from tests.core.test_archive import _run  # a minimal valid run row

    inflight = archive.begin_run(_run("r1"))
    session = run_session(
        ["cat", str(script)], env=dict(os.environ), cwd=tmp_path, on_line=inflight.append, timeout=30
    )
    assert session.summary.n_lines == 5
    # the journal is ASCII JSON, one entry per line, whatever the lines hold
    journal = inflight.journal_path.read_bytes()
    assert journal.isascii() and len(split_lines(journal)) == 5
    inflight.commit(inflight.run.model_copy(update={"n_lines": 5}), [])
    ev = pl.read_parquet(archive.root / "events" / "r1.parquet").sort("seq", "block_index")
    got = ev.group_by("seq", maintain_order=True).agg(pl.col("raw").first(), pl.col("raw_encoding").first())
    assert [_raw_bytes(r, e) for _, r, e in got.rows()] == split_lines(payload)
    assert got["raw_encoding"].to_list() == [None, "base64", None, None, "base64"]
    assert ev.filter(pl.col("seq") == 2)["text"][0] == "a\x85b\u2028c"
    assert ev.filter(pl.col("seq") == 3)["text"][0] == "\ufffd x"
    assert ev.filter(pl.col("seq") == 4)["malformed"][0]
    check_archive(archive.root)


# --- quarantine -------------------------------------------------------------------------------------
def _poison(root: Path) -> dict[str, str]:
    """Files a crashed or hostile recorder may leave in inflight/: garbage, a row that cannot be
    committed, a journal without its row; and one good journal (lone surrogate escapes, NEL) that
    must be committed, not quarantined. Returns name -> expected fate."""
    from tests.core.test_archive import _run

    inflight = root / "inflight"
    (inflight / "garbage.json").write_bytes(b"\x00\xffnot json at all")
    bad = json.loads(_run("bad1").model_dump_json())
    bad["rep"] = 2**70  # a valid row whose runs file cannot be written (Int64), after its events'
    (inflight / "bad1.json").write_text(json.dumps(bad))
    surrogate = json.loads(_run("bad2").model_dump_json())
    surrogate["outcome_detail"] = "\ud83d"  # a lone surrogate in the row itself
    (inflight / "bad2.json").write_text(json.dumps(surrogate))
    (inflight / "bad1.jsonl").write_text('{"t":"2026-01-01T00:00:00+00:00","line":"{}"}\n')
    (inflight / "orphan.jsonl").write_text('{"t":"2026-01-01T00:00:00+00:00","line":"{}"}\n')
    (inflight / "good1.json").write_text(_run("good1").model_dump_json())
    lines = ['{"type":"system","subtype":"init"}', '{"type":"user","message":{"content":"\\ud83d\x85x"}}']
    (inflight / "good1.jsonl").write_text(
        "".join(json.dumps({"t": "2026-01-01T00:00:01+00:00", "line": ln}) + "\n" for ln in lines)
    )
    return {"garbage": "quarantine", "bad1": "quarantine", "bad2": "quarantine", "orphan": "quarantine"}


def _check_quarantined(root: Path, stderr: str) -> None:
    warnings = [ln for ln in stderr.splitlines() if ln.startswith("warning: quarantined")]
    assert len(warnings) == 4, stderr  # one per file set
    assert "Traceback" not in stderr
    q = root / "quarantine"
    reasons = {p.name for p in q.glob("*.reason")}
    assert reasons == {"garbage.reason", "bad1.reason", "bad2.reason", "orphan.reason"}
    assert (q / "bad1.json").exists() and (q / "bad1.jsonl").exists()
    for reason in q.glob("*.reason"):
        assert len(reason.read_text().strip().splitlines()) == 1
    assert not list((root / "inflight").iterdir())
    df = check_archive(root)
    good = df.filter(pl.col("run_id") == "good1").row(0, named=True)
    assert good["outcome"] == "interrupted" and good["n_lines"] == 2
    assert not (root / "runs" / "bad1.parquet").exists()
    assert (
        not (root / "events" / "bad1.parquet").exists() and not (root / "artifacts" / "bad1.parquet").exists()
    )
    text = _events(root).filter(pl.col("run_id") == "good1")["text"].to_list()
    assert "\ufffd\x85x" in text


def test_recover_quarantines_what_cannot_be_committed(tmp_path: Path) -> None:
    root = tmp_path / "archive"
    Archive(root).ensure()
    _poison(root)
    res = run_recorder("recover", "--archive", root)
    assert res.returncode == 0, res.stderr
    assert res.stderr.strip().splitlines()[-1] == "recovered 1 interrupted reps"
    _check_quarantined(root, res.stderr)
    again = run_recorder("recover", "--archive", root)  # nothing left: no warning, nothing new
    assert again.returncode == 0 and again.stderr.strip() == "recovered 0 interrupted reps", again.stderr


@pytest.mark.client
@pytest.mark.parametrize("command", ["run", "grid"])
def test_poisoned_archive_does_not_block_a_recorder(tmp_path: Path, command: str) -> None:
    """`run` and `grid` on an archive with poison in inflight/ quarantine it and record as usual."""
    root = tmp_path / "archive"
    Archive(root).ensure()
    _poison(root)
    if command == "run":
        res = run_recorder("run", "R1", "scripted:oracle", "--archive", root)
    else:
        spec = tmp_path / "grid.yaml"
        spec.write_text("scenarios: [R1]\nmodels: ['scripted:oracle']\nreps: 1\n")
        res = run_recorder("grid", spec, "--archive", root)
    assert res.returncode == 0, res.stderr
    _check_quarantined(root, res.stderr)
    df = runs(root)
    assert df.filter(pl.col("run_id") != "good1")["outcome"].to_list() == ["completed"]
    _score(root)


# --- one rep's harness failure does not stop the grid -------------------------------------------------
_DRIVER = """
import sys
import runner.capture, runner.record
real = runner.capture.collect
def collect(run_id, sandbox, initial, limits=None):
    if sandbox.parent.name.startswith("evalb-R2-"):
        raise RuntimeError("injected: cannot read the end state")
    return real(run_id, sandbox, initial, limits)
runner.record.capture.collect = collect
from cli.record import main
sys.argv = ["evalb-record", *sys.argv[1:]]
main()
"""


@pytest.mark.client
def test_a_rep_failing_in_the_harness_is_recorded_and_the_grid_goes_on(tmp_path: Path) -> None:
    """The real CLI with a fault injected into R2's end-state capture: R1 and R3 complete, R2 is
    recorded `harness_error` (reason, lines kept, INVALID when scored), the CLI exits 3 (harness error) in one
    line; the rerun retries only R2 and exits 0."""
    root = tmp_path / "archive"
    args = ["run", "R1,R2,R3", "scripted:oracle", "--jobs", "2", "--archive", str(root)]
    driver = subprocess.run(
        [sys.executable, "-c", _DRIVER, *args], capture_output=True, text=True, timeout=300
    )
    assert driver.returncode == 3, driver.stderr
    last = driver.stderr.strip().splitlines()[-1]
    assert last.startswith("error: 1 rep(s) failed in the harness") and "rerun" in last, driver.stderr
    assert "Traceback" not in driver.stderr and "Ctrl-C" not in driver.stderr
    df = check_archive(root)
    assert sorted(df.select("variant", "outcome").rows()) == [
        ("R1", "completed"),
        ("R2", "harness_error"),
        ("R3", "completed"),
    ]
    bad = df.filter(pl.col("variant") == "R2").row(0, named=True)
    assert bad["outcome_detail"].startswith(
        "harness error while collecting the sandbox's end state: RuntimeError: injected"
    )
    assert bad["n_lines"] > 0 and bad["reached_model"]
    assert _events(root).filter(pl.col("run_id") == bad["run_id"])["seq"].n_unique() == bad["n_lines"]
    _score(root)
    scores = pl.read_parquet(str(root / "scores" / "*.parquet")).filter(pl.col("run_id") == bad["run_id"])
    assert scores.height >= 1 and not scores["valid"].any()
    assert scores["invalid_reason"][0].startswith("harness_error: harness error while collecting")

    rerun = run_recorder(*args)
    assert rerun.returncode == 0, rerun.stderr
    df = check_archive(root)
    r2 = df.filter(pl.col("variant") == "R2").sort("attempt")
    assert r2.select("attempt", "outcome").rows() == [(1, "harness_error"), (2, "completed")]
    assert df.height == 4  # R1 and R3 were not recorded again


@pytest.mark.client
def test_a_failing_commit_is_recorded_on_its_rep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In process: the commit of R2's rep raises; R2 is committed as harness_error with its lines
    by the fallback, R1 completes, nothing is left in flight, the grid report lists the failure."""
    from evalb.journal import InflightRun

    real_commit = InflightRun.commit

    def commit(self: InflightRun, run, artifacts):  # type: ignore[no-untyped-def]
        if run.variant == "R2":
            raise OSError(28, "No space left on device (injected)")
        return real_commit(self, run, artifacts)

    monkeypatch.setattr(InflightRun, "commit", commit)
    root = tmp_path / "archive"
    report = record_grid(root, ["R1", "R2"], ["scripted:oracle"], 1, jobs=2)
    df = check_archive(root)
    assert dict(df.select("variant", "outcome").rows()) == {"R1": "completed", "R2": "harness_error"}
    assert [slot.split("|")[0] for slot, _ in report.failed] == ["R2"]
    detail = df.filter(pl.col("variant") == "R2")["outcome_detail"][0]
    assert detail.startswith("harness error while committing the rep: OSError: [Errno 28] No space left")
    assert "R2" not in {s.split("|")[0] for s in Archive(root).committed_slots()}


# --- timeouts --------------------------------------------------------------------------------------
@pytest.mark.client
def test_timeout_while_the_agents_tool_runs_is_a_scored_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sleep 120` in Bash with --timeout 15: the agent was working, so the rep is `timeout` and
    scored as it stands (valid), not a client error."""
    root = tmp_path / "archive"
    df = record_shell(root, tmp_path, ["sleep 120"], monkeypatch=monkeypatch, timeout=15)
    check_archive(root)
    run = df.row(0, named=True)
    assert run["outcome"] == "timeout", run["outcome_detail"]
    assert "tool was still running" in run["outcome_detail"]
    from analysis.checker import score_archive

    sp = score_archive(root)
    row = sp.scores.row(0, named=True)
    assert row["valid"], row["invalid_reason"]
    assert row["verdict"] in ("PASS", "FAIL")


# --- interruptions say what interrupted them -----------------------------------------------------------
@pytest.mark.client
def test_sigterm_and_a_killed_recorder_are_named(tmp_path: Path) -> None:
    """SIGTERM mid-rep: exit 130, one line, the rep `interrupted` by SIGTERM. A recorder killed with
    SIGKILL: the rerun's recovery names the dead recorder's pid."""
    root, work = tmp_path / "archive", tmp_path / "work"
    work.mkdir()
    slow = ("--inject-fault", "slow:turn=any,times=1000,stall_seconds=1.5")
    base = ("run", "R1", "scripted:oracle", "--archive", root, "--workdir", work)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        proc = recorder(*base, "--reps", 1 if sig == signal.SIGTERM else 2, *slow)
        wait_for(
            lambda: any(len(p.read_bytes().splitlines()) >= 4 for p in (root / "inflight").glob("*.jsonl")),
            120,
            "a rep in flight that has spoken",
        )
        proc.send_signal(sig)
        _out, err = proc.communicate(timeout=30)
        if sig == signal.SIGTERM:
            assert proc.returncode == 130 and err.strip().splitlines()[-1].startswith("error: interrupted"), (
                err
            )
            row = runs(root).row(0, named=True)
            assert row["outcome"] == "interrupted"
            assert "(SIGTERM)" in row["outcome_detail"], row["outcome_detail"]
        else:
            pid = proc.pid
    res = run_recorder("recover", "--archive", root)
    assert res.returncode == 0, res.stderr
    df = check_archive(root)
    recovered = df.filter(pl.col("outcome_detail").str.contains("killed or died"))
    assert recovered.height == 1 and f"pid {pid})" in recovered["outcome_detail"][0]


# --- refusals ----------------------------------------------------------------------------------------
def _refused(res: subprocess.CompletedProcess[str], needle: str) -> None:
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2, res.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], res.stderr


@pytest.mark.parametrize(
    ("option", "where", "needle"),
    [
        ("--archive", paths.FIXTURE_DIR / "evalb-test-archive", "inside the fixture (fixture/)"),
        ("--archive", paths.FIXTURE_PROJECT / "evalb-test-archive", "fixture's project tree"),
        ("--archive", paths.REFERENCE_PLUGIN / "evalb-test-archive", "inside the plugin under test"),
        ("--archive", paths.SCENARIOS_DIR / "evalb-test-archive", "inside the scenarios directory"),
        ("--workdir", paths.FIXTURE_PROJECT / "evalb-test-work", "fixture's project tree"),
        ("--workdir", paths.REFERENCE_PLUGIN / "hooks" / "evalb-test-work", "inside the plugin under test"),
    ],
    ids=[
        "archive-fixture",
        "archive-project",
        "archive-plugin",
        "archive-scenarios",
        "workdir-project",
        "workdir-plugin",
    ],
)
def test_outputs_inside_the_inputs_are_refused(option: str, where: Path, needle: str) -> None:
    before = sorted(p.name for p in where.parent.iterdir())
    res = run_recorder("run", "R1", "scripted:oracle", option, where)
    _refused(res, needle)
    assert not where.exists() and sorted(p.name for p in where.parent.iterdir()) == before


def test_every_command_refuses_an_archive_inside_the_inputs(tmp_path: Path) -> None:
    target = paths.FIXTURE_PROJECT / "evalb-test-archive"
    spec = tmp_path / "grid.yaml"
    spec.write_text("scenarios: [R1]\nmodels: ['scripted:oracle']\nreps: 1\n")
    plugin = tmp_path / "plugin"
    shutil.copytree(paths.REFERENCE_PLUGIN, plugin)
    transcript = tmp_path / "t.jsonl"
    transcript.write_text('{"type":"result","subtype":"success"}\n')
    for args in (
        ["grid", spec, "--archive", target],
        ["import", transcript, "--scenario", "R1", "--model", "haiku", "--archive", target],
        ["recover", "--archive", target],
        ["migrate", "--archive", target],
        ["run", "R1", "scripted:oracle", "--plugin-dir", plugin, "--archive", plugin / "out"],
    ):
        res = run_recorder(*args)
        _refused(res, "is inside")
    assert not target.exists() and not (plugin / "out").exists()


def test_a_commit_that_fails_half_way_leaves_no_orphan_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runs file (written last) fails: the run's events and artifacts files are removed again."""
    from evalb import archive as archive_mod
    from tests.core.test_archive import _run

    real = archive_mod.write_parquet_atomic

    def write(frame: pl.DataFrame, dest: Path) -> None:
        if dest.parent.name == "runs":
            raise archive_mod.ArchiveError("injected: the runs file cannot be written")
        real(frame, dest)

    monkeypatch.setattr(archive_mod, "write_parquet_atomic", write)
    archive = Archive(tmp_path / "archive")
    archive.ensure()
    with pytest.raises(archive_mod.ArchiveError, match="injected"):
        archive.commit_run(_run("r1"), [], [])
    assert not list(archive.root.rglob("*.parquet"))


_INIT = '{"type":"system","subtype":"init","model":"m"}'
_TOOL_USE = (
    '{"type":"assistant","message":{"model":"m","content":[{"type":"tool_use","id":"t1","name":"Bash",'
    '"input":{"command":"sleep 120"}}]}}'
)
_TASK = '{"type":"system","subtype":"task_started","tool_use_id":"t1","task_type":"local_bash"}'
_RESULT = '{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]}}'
_TEXT = '{"type":"assistant","message":{"model":"m","content":[{"type":"text","text":"Let me"}]}}'
_SYNTH = (
    '{"type":"assistant","message":{"model":"<synthetic>","content":[{"type":"text","text":"API Error"}]}}'
)
_RETRY = '{"type":"system","subtype":"api_retry","error_status":529}'


@pytest.mark.parametrize(
    ("lines", "outcome"),
    [
        ([_INIT, _TOOL_USE], "timeout"),  # the tool was running
        ([_INIT, _TOOL_USE, _TASK], "timeout"),  # ... and the client said so
        ([_INIT, _TOOL_USE, _RESULT], "client_error"),  # the tool result sent: waiting for the API
        ([_INIT, _TOOL_USE, _RESULT, _TEXT], "client_error"),  # a reply stopped half way
        ([_INIT, _TOOL_USE, _RESULT, _RETRY], "client_error"),
        ([_INIT, _TEXT, _SYNTH], "client_error"),
        ([_INIT], "timeout"),  # before the first turn (invalid when scored, retried by the grid)
    ],
    ids=["tool-use", "task-started", "tool-result", "half-reply", "api-retry", "synthetic", "no-turn"],
)
def test_a_timeout_is_the_agents_only_while_its_tool_runs(lines: list[str], outcome: str) -> None:
    from evalb.transcript import TranscriptSummary
    from runner.client import classify

    summary = TranscriptSummary()
    for line in lines:
        summary.feed(line)
    assert classify(None, summary, timed_out=True, timeout=15, stop=[])[0] == outcome
