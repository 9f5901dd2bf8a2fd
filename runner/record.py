"""Recording one rep: fresh sandbox, confined client, journaled transcript, end state, committed run row."""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import hashlib
import json
import os
import socket
import subprocess
import tempfile
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from evalb import __version__, manifest, paths, sandbox
from evalb.archive import Archive
from evalb.errors import ClientError, UsageError
from evalb.journal import InflightRun
from evalb.scenarios import Scenario, Variant, resolve_variant
from evalb.schema import RunRecord, run_record
from evalb.transcript import TranscriptSummary
from runner import capture
from runner.client import SessionResult, limit_args, run_session
from runner.confine import confine_command, install_dir
from runner.credproxy import CredentialProxy
from runner.environment import client_env, proxy_route
from runner.limits import Limits, RepGuard
from runner.scripted.policies import RepContext, parse_model
from runner.scripted.server import Fault, ModelServer

#: The arm of a grid or run naming one plugin (and of every run recorded before arms existed).
DEFAULT_ARM = "default"
#: The plugin-hash field of the slot key of a no-plugin arm.
NO_PLUGIN = "no-plugin"


@dataclass
class RecordOptions:
    """How reps are run; the same for every rep of a grid."""

    #: the plugin under test; None = a no-plugin arm (the client runs without --plugin-dir)
    plugin_dir: Path | None = field(default_factory=lambda: paths.REFERENCE_PLUGIN)
    #: the grid arm these reps belong to (runs.arm); 'default' for a grid naming one plugin
    arm: str = DEFAULT_ARM
    client: Path = field(default_factory=paths.client_binary)
    timeout: float | None = None  # default: 180 s scripted, 900 s real
    confine: bool = True
    workdir: Path | None = None
    keep_sandboxes: bool = False
    max_api_retries: int = 6
    faults: list[Fault] = field(default_factory=list)  # injected into scripted reps (hardening tests)
    limits: Limits = field(default_factory=Limits)
    credentials: str = "proxy"  # proxy: the client holds a dummy key (runner.credproxy); env: the real one
    network: str = "open"  # api-only: no network in the rep but the proxy's unix socket (confined only)
    max_turns: int | None = None  # the client's own --max-turns (outcome turn_limit)
    max_budget_usd: float | None = None  # the client's own --max-budget-usd (outcome budget_limit)

    def timeout_for(self, model: str) -> float:
        if self.timeout is not None:
            return self.timeout
        return 180.0 if model.startswith("scripted:") else 900.0


@dataclass(frozen=True)
class Identity:
    """What every rep of an arm shares: the plugin's identity (None for a no-plugin arm) and the
    frozen-part hashes (the plugin part: the arm's plugin, or 'none').

    Computed once per arm of a grid (hashing the fixture and plugin trees costs tens of ms), not per rep."""

    plugin_name: str | None
    plugin_version: str | None
    plugin_hash: str | None
    frozen: dict[str, str]


def identity(options: RecordOptions) -> Identity:
    if options.plugin_dir is None:
        frozen = manifest.frozen_manifest() | {"plugin": "none"}
        return Identity(None, None, None, frozen)
    name, version, digest = manifest.plugin_identity(options.plugin_dir)
    return Identity(name, version, digest, manifest.frozen_manifest(plugin_dir=options.plugin_dir))


def slot_key(variant: str, model: str, plugin_hash: str | None, rep: int, arm: str = DEFAULT_ARM) -> str:
    """The grid slot a rep fills; resuming skips slots that already hold a finished run.

    The 'default' arm keeps the key of the runs recorded before arms existed; a named arm adds its
    name, so two arms with identical plugin directories are distinct slots."""
    key = f"{variant}|{model}|{(plugin_hash or NO_PLUGIN)[:16]}|{rep}"
    return key if arm == DEFAULT_ARM else f"{key}|{arm}"


@functools.cache
def client_version(client: Path) -> str | None:
    """`claude --version`, once per process, for runs whose transcript has no system/init."""
    try:
        out = subprocess.run([str(client), "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.split()[0] if out.strip() else None


def check_client(client: Path) -> None:
    """Fail early, with the fix, when the client binary is missing."""
    if not client.is_file():
        raise ClientError(
            f"Claude Code client not found at {client}",
            hint="run scripts/setup (installs the pinned version), or point EVALB_CLAUDE_BIN / --client at one",
        )


def rep_seed(variant: str, model: str, rep: int, base: float = 0) -> int:
    digest = hashlib.sha256(f"{variant}|{model}|{rep}|{base}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def record_rep(
    variant_id: str,
    model: str,
    rep: int,
    archive: Archive,
    options: RecordOptions,
    *,
    server: ModelServer | None = None,
    attempt: int = 1,
    ident: Identity | None = None,
    stop: threading.Event | None = None,
    plan: dict[str, object] | None = None,
) -> RunRecord:
    """Record one rep into `archive` and return its committed run row.

    `stop` set (Ctrl-C in a grid) ends the rep at once; it is committed as `interrupted` with
    every line it had. Anything raised while building, capturing or committing the rep is recorded
    on it as outcome `harness_error` (the reason in `outcome_detail`, its lines kept) instead of
    propagating; such a run does not fill its slot, so a rerun tries the rep again. `plan` (the
    grid's seed and the rep's position in its order) is stored in the run's options_json."""
    scenario, variant = resolve_variant(variant_id)
    ident = ident or identity(options)
    scripted = model.startswith("scripted:")
    ctx = None
    if scripted:
        policy, params = parse_model(model)
        ctx = RepContext(
            variant=variant.id,
            kind=scenario.kind.value,
            hints=scenario.policy,
            policy=policy,
            params=params,
            seed=rep_seed(variant.id, model, rep, params.get("seed", 0)),
        )
        if server is None:
            raise UsageError("a scripted model needs the scripted model server")

    work = Path(tempfile.mkdtemp(prefix=f"evalb-{variant.id}-", dir=options.workdir))
    sandbox_dir, home = work / "sandbox", work / "home"
    base_url = None
    stage = "building the sandbox"
    confinement, cred_note = "n/a (the rep failed before its client started)", ""
    inflight: InflightRun | None = None
    final: RunRecord | None = None
    proxy: CredentialProxy | None = None
    guard = RepGuard(options.limits, confined=options.confine)
    try:
        home.mkdir()
        built = sandbox.build_sandbox(variant.id, sandbox_dir, plugin_dir=options.plugin_dir)
        stage = "preparing the client"
        if ctx is not None and server is not None:
            faults = [f for f in options.faults if f.attempts is None or attempt <= f.attempts]
            base_url = server.register(ctx, [Fault(**{**f.__dict__, "hits": 0}) for f in faults])
        no_net = options.network == "api-only"
        route = proxy_route(base_url, os.environ) if options.credentials == "proxy" or no_net else None
        if no_net and (route is None or not options.confine):
            raise UsageError(
                "--network api-only needs a confined rep and a credential the proxy can carry",
                hint="drop --no-confine; Bedrock/Vertex credentials cannot go through the proxy",
            )
        sock = work / "api" / "proxy.sock"
        if no_net:
            sock.parent.mkdir()
        if route is not None:
            proxy = CredentialProxy(route[0], route[1], unix_path=str(sock) if no_net else None).start()
        env, cred_note = client_env(
            home,
            base_url=base_url,
            max_api_retries=options.max_api_retries,
            proxy=(proxy.url, route[2]) if proxy is not None and route is not None else None,
            unix_socket=str(sock) if no_net else None,
        )
        cmd = [
            str(options.client),
            "-p",
            "--output-format", "stream-json",
            "--verbose",
            "--model", model,
            "--dangerously-skip-permissions",
            *(["--plugin-dir", str(options.plugin_dir.resolve())] if options.plugin_dir else []),
            *limit_args(options.max_turns, options.max_budget_usd),
            scenario.task_prompt(),
        ]  # fmt: skip
        cmd, confinement = confine_command(
            cmd,
            sandbox=sandbox_dir,
            home=home,
            confine=options.confine,
            keep_visible=[options.client, install_dir(options.client)]
            + ([options.plugin_dir] if options.plugin_dir else [])
            + ([sock.parent] if no_net else []),
            tmp_size=options.limits.tmp,
            unshare_net=no_net,
        )
        guard.open()
        run = _run_row(scenario, variant, model, rep, attempt, options, ident, confinement, cred_note, plan)
        opts = json.loads(run.options_json) | {
            "credential_mode": "proxy" if proxy is not None else "env",
            "network": options.network,
            "limits_enforced": guard.enforced,
        }
        run = run.model_copy(update={"options_json": json.dumps(opts, sort_keys=True, default=str)})
        stage = "starting the rep's journal"
        inflight = archive.begin_run(run)
        stage = "capturing the client's output"
        guard.watch_tmp()
        session = run_session(
            cmd,
            env=env,
            cwd=sandbox_dir,
            on_line=inflight.append,
            timeout=options.timeout_for(model),
            max_api_retries=options.max_api_retries,
            stop=stop,
            preexec=guard.preexec,
        )
        final = _final_run(run, session, options.client)
        stage = "checking the rep's limits"
        limit = guard.hit((sandbox_dir, home))
        opts |= {"limits_peak": guard.peaks(), "processes_killed_at_end": guard.kill_all()}
        final = final.model_copy(update={"options_json": json.dumps(opts, sort_keys=True, default=str)})
        if limit and final.outcome != "interrupted":
            final = final.model_copy(update={"outcome": "resource_limit", "outcome_detail": limit})
        if base_url and server is not None:
            served = server.unregister(base_url)
            base_url = None
            if options.faults:
                opts = json.loads(final.options_json) | {"faults_served": served}
                final = final.model_copy(update={"options_json": json.dumps(opts, sort_keys=True)})
        stage = "collecting the sandbox's end state"
        end = capture.collect(run.run_id, sandbox_dir, built.initial_tree)
        stage = "committing the rep"
        inflight.commit(final.model_copy(update={"capture_json": end.summary_json()}), end.rows)
        return final
    except Exception as e:
        # a fault of the harness, not of the agent or the client: recorded on this rep (its lines
        # kept), which does not fill its slot, and the grid goes on
        detail = f"harness error while {stage}: {type(e).__name__}: {' '.join(str(e).split())}"[:400]
        row = final or _run_row(
            scenario, variant, model, rep, attempt, options, ident, confinement, cred_note, plan
        )
        row = row.model_copy(update={"outcome": "harness_error", "outcome_detail": detail})
        if inflight is not None:
            inflight.fail(row)
        else:
            archive.commit_run(row, [], [])
        return row
    except BaseException:
        # Ctrl-C (or SIGTERM) reaching this thread: commit what the rep had, as interrupted, at once
        if inflight is not None:
            why = getattr(stop, "reason", None) or "Ctrl-C"
            inflight.interrupt(f"the recorder was stopped ({why}) during the rep; lines kept")
        raise
    finally:
        guard.close()
        if proxy is not None:
            proxy.stop()
        if base_url and server is not None:
            with contextlib.suppress(Exception):
                server.unregister(base_url)
        if not options.keep_sandboxes:
            sandbox.remove_tree(work)  # however deep the agent made it


def _run_row(
    scenario: Scenario,
    variant: Variant,
    model: str,
    rep: int,
    attempt: int,
    options: RecordOptions,
    ident: Identity,
    confinement: str,
    cred_note: str,
    plan: dict[str, object] | None = None,
) -> RunRecord:
    """The rep's run row as known before its client starts (committed as is if the rep never ends)."""
    frozen = ident.frozen
    opts = {
        "timeout_s": options.timeout_for(model),
        "confine": options.confine,
        "credentials": cred_note,
        "max_api_retries": options.max_api_retries,
        "max_turns": options.max_turns,
        "max_budget_usd": options.max_budget_usd,
        "faults": [f.__dict__ | {"hits": 0} for f in options.faults] if options.faults else [],
        **(plan or {}),
    }
    return run_record(
        TranscriptSummary(),  # nothing seen yet
        run_id=uuid.uuid4().hex,
        slot=slot_key(variant.id, model, ident.plugin_hash, rep, options.arm),
        source="record",
        scenario=scenario.id,
        variant=variant.id,
        model_alias=model,
        rep=rep,
        attempt=attempt,
        started_at=dt.datetime.now(dt.UTC),
        ended_at=None,
        duration_ms=None,
        exit_code=None,
        outcome="interrupted",
        outcome_detail="the rep had not ended when this row was written",
        client_path=str(options.client),
        plugin_name=ident.plugin_name,
        plugin_version=ident.plugin_version,
        plugin_hash=ident.plugin_hash,
        plugin_dir=str(options.plugin_dir.resolve()) if options.plugin_dir else None,
        arm=options.arm,
        fixture_hash=frozen.get("fixture"),
        scenario_hash=scenario.sha256,
        rubric_hash=frozen.get("judge_rubric"),
        rules_hash=frozen.get("checker_rules"),
        manifest_json=json.dumps(frozen, sort_keys=True),
        confinement=confinement,
        stderr="",
        recorder_version=__version__,
        host=socket.gethostname(),
        options_json=json.dumps(opts, sort_keys=True, default=str),
    )


def _final_run(run: RunRecord, s: SessionResult, client: Path) -> RunRecord:
    fields = s.summary.run_fields()
    fields["client_version"] = fields["client_version"] or client_version(client)
    return run.model_copy(
        update={
            **fields,
            "started_at": s.started_at,
            "ended_at": s.ended_at,
            "duration_ms": s.duration_ms,
            "exit_code": s.exit_code,
            "outcome": s.outcome,
            "outcome_detail": s.detail,
            "stderr": s.stderr,
        }
    )
