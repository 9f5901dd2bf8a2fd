"""The client's environment: an allow-list, a throwaway HOME, and no credential the agent can read.

Nothing else from the recorder's environment reaches the session (no cloud tokens, no secrets):
the agent runs with --dangerously-skip-permissions, so whatever it can read it may print. The
credential itself goes to the loopback credential proxy (runner.credproxy), not to the client:
the client holds `DUMMY_KEY` in the variable of the credential's kind and talks to the proxy,
which adds the real header. Only provider credentials (Bedrock, Vertex: signed requests, not one
header) and `--credentials env` put the real credential into the client's environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from evalb.errors import ClientError
from runner.credproxy import DUMMY_KEY

#: Passed through as they are when set: what a process needs to run, and nothing secret.
PASSTHROUGH = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM", "PYENV_ROOT", "PYENV_VERSION")

#: Credential variables for a real model, in the order the runner prefers them. Provider ones
#: (Bedrock, Vertex) go through as a group when their switch variable is set.
CREDENTIALS = ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_AUTH_TOKEN")
PROVIDERS: dict[str, tuple[str, ...]] = {
    "CLAUDE_CODE_USE_BEDROCK": (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_REGION",
        "AWS_PROFILE",
        "AWS_BEARER_TOKEN_BEDROCK",
        "ANTHROPIC_BEDROCK_BASE_URL",
    ),
    "CLAUDE_CODE_USE_VERTEX": (
        "ANTHROPIC_VERTEX_PROJECT_ID",
        "CLOUD_ML_REGION",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "ANTHROPIC_VERTEX_BASE_URL",
    ),
}
#: Fixed settings for every rep: no updater, no telemetry, allowed to skip permissions as root.
FIXED = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "IS_SANDBOX": "1",
    "CI": "1",
}


def credentials_for_real_model(source: Mapping[str, str]) -> tuple[dict[str, str], str]:
    """The credential variables to pass for a real model, and a line saying which one is used."""
    for switch, names in PROVIDERS.items():
        if source.get(switch):
            picked = {switch: source[switch], **{n: source[n] for n in names if source.get(n)}}
            return (
                picked,
                f"{switch} with {', '.join(n for n in picked if n != switch) or 'ambient provider auth'}",
            )
    for name in CREDENTIALS:
        if source.get(name):
            extra = (
                {"ANTHROPIC_BASE_URL": source["ANTHROPIC_BASE_URL"]}
                if source.get("ANTHROPIC_BASE_URL")
                else {}
            )
            return {name: source[name], **extra}, name
    raise ClientError(
        "no credentials for a real model",
        hint="set ANTHROPIC_API_KEY, or CLAUDE_CODE_OAUTH_TOKEN from `claude setup-token` "
        "(a login stored under ~/.claude is hidden by the throwaway HOME), or use a scripted:POLICY model",
    )


DEFAULT_API = "https://api.anthropic.com"
SCRIPTED_KEY = "scripted-model-needs-no-key"


def proxy_route(base_url: str | None, source: Mapping[str, str]) -> tuple[str, dict[str, str], str] | None:
    """How the credential proxy reaches the model: (upstream base URL, header it adds, the client's
    variable for the dummy); None for provider credentials, which cannot be proxied by one header."""
    if base_url:
        return base_url, {"x-api-key": SCRIPTED_KEY}, "ANTHROPIC_API_KEY"
    creds, _ = credentials_for_real_model(source)
    if any(source.get(switch) for switch in PROVIDERS):
        return None
    name = next(n for n in CREDENTIALS if n in creds)
    header = (
        {"x-api-key": creds[name]}
        if name == "ANTHROPIC_API_KEY"
        else {"authorization": f"Bearer {creds[name]}"}
    )
    return source.get("ANTHROPIC_BASE_URL") or DEFAULT_API, header, name


def client_env(
    home: Path,
    *,
    base_url: str | None,
    source: Mapping[str, str] | None = None,
    max_api_retries: int | None = None,
    proxy: tuple[str, str] | None = None,
    unix_socket: str | None = None,
) -> tuple[dict[str, str], str]:
    """Environment for one rep: allow-listed variables, private HOME, and either the scripted
    model's URL (`base_url`) or the user's real credentials. Returns (env, credential note).

    `max_api_retries` bounds the client's own API retries (CLAUDE_CODE_MAX_RETRIES, honoured by
    2.1.197; its default is 10, with delays growing to ~40 s), so a rep that cannot reach the
    model ends by itself in seconds rather than minutes. `proxy` = (proxy URL, variable): the
    client talks to the credential proxy and holds only `DUMMY_KEY` in that variable; through
    `unix_socket` (ANTHROPIC_UNIX_SOCKET) when the rep has no network."""
    source = os.environ if source is None else source
    env = {k: source[k] for k in PASSTHROUGH if source.get(k)}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(FIXED)
    if max_api_retries is not None:
        env["CLAUDE_CODE_MAX_RETRIES"] = str(max_api_retries)
    env["HOME"] = str(home)
    env["CLAUDE_CONFIG_DIR"] = str(home / ".claude")
    env["TMPDIR"] = "/tmp"
    if proxy:
        env["ANTHROPIC_BASE_URL"], var = proxy
        env[var] = DUMMY_KEY
        if unix_socket:
            env["ANTHROPIC_UNIX_SOCKET"] = unix_socket
        what = "scripted model" if base_url else var
        return env, f"{what} through the credential proxy (the client holds a dummy key)"
    if base_url:
        env["ANTHROPIC_BASE_URL"] = base_url
        env["ANTHROPIC_API_KEY"] = SCRIPTED_KEY
        return env, "scripted model (no credentials)"
    creds, note = credentials_for_real_model(source)
    env.update(creds)
    return env, note
