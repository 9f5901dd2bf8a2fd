"""Per-rep confinement with bubblewrap: the agent may write only its sandbox, its HOME and a private /tmp.

What the confined client sees:
- the host's file system read-only (`--ro-bind / /`), with the recorder's real HOME hidden under an
  empty tmpfs (a login under ~/.claude, cloud credentials, ssh keys), except for the entries of it
  that the rep needs (those holding the client binary, the plugin, or a PATH entry such as
  ~/.pyenv), bound back read-only;
- its sandbox and its private HOME writable, a private /tmp (the client's Bash tool needs one);
- its own PID namespace (`--unshare-pid`): /proc shows only the rep's processes, so the agent cannot
  read the recorder's environment through /proc/PID/environ;
- the network as it is, so the loopback model and the real API stay reachable.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from evalb.errors import ConfinementError

NO_CONFINEMENT = "none (opted out)"
BWRAP_MISSING = "bubblewrap (bwrap) is not installed, so reps cannot be confined"
BWRAP_HINT = (
    "install it (apt-get install bubblewrap; scripts/setup does) or pass --no-confine to run unconfined"
)


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


def require_bwrap() -> str:
    """The bwrap binary, or the one-line refusal the runner gives without it."""
    bwrap = bwrap_path()
    if not bwrap:
        raise ConfinementError(BWRAP_MISSING, hint=BWRAP_HINT)
    return bwrap


def _top_under(path: Path, home: Path) -> Path | None:
    """The entry of `home` that holds `path` (e.g. ~/.pyenv for ~/.pyenv/shims), or None.

    Whole top-level entries are bound back, not single paths: a toolchain on PATH (pyenv, rbenv,
    ~/.local) needs its neighbours (pyenv's shims run ~/.pyenv/libexec/pyenv)."""
    if home not in path.parents:
        return None
    return home / path.relative_to(home).parts[0]


def confine_command(
    cmd: list[str],
    *,
    sandbox: Path,
    home: Path,
    confine: bool,
    keep_visible: Iterable[Path] = (),
    real_home: Path | None = None,
) -> tuple[list[str], str]:
    """Wrap `cmd` in bwrap (see the module doc). `keep_visible` are paths the rep needs read-only
    even if they lie under the real HOME. Returns (command, confinement label)."""
    if not confine:
        return cmd, NO_CONFINEMENT
    bwrap = require_bwrap()
    real_home = (real_home or Path(os.path.expanduser("~"))).resolve()
    hide_home: list[str] = []
    if real_home != Path("/") and real_home.is_dir():
        hide_home = ["--tmpfs", str(real_home)]
        wanted = [Path(p) for p in keep_visible] + [
            Path(p) for p in os.environ.get("PATH", "").split(os.pathsep) if p
        ]
        for p in dict.fromkeys(_top_under(x.resolve(), real_home) for x in wanted if x.exists()):
            if p is not None:
                hide_home += ["--ro-bind", str(p), str(p)]
        # read-only like the rest of the host: a write there fails instead of vanishing silently
        hide_home += ["--remount-ro", str(real_home)]
    # The rep gets a private, empty /tmp. What it needs from the real /tmp (the client, the plugin,
    # tools on PATH: e.g. a checkout living under /tmp, as CI's may) is bound back read-only, by
    # top-level entry, so it stays visible exactly as it would be outside /tmp.
    tmp = Path("/tmp")
    wanted_tmp = [Path(p) for p in keep_visible] + [
        Path(p) for p in os.environ.get("PATH", "").split(os.pathsep) if p
    ]
    keep_tmp: list[str] = []
    for p in dict.fromkeys(_top_under(x.resolve(), tmp) for x in wanted_tmp if x.exists()):
        if p is not None:
            keep_tmp += ["--ro-bind", str(p), str(p)]
    wrapped = [
        bwrap,
        "--ro-bind", "/", "/",
        *hide_home,
        "--tmpfs", "/tmp",
        *keep_tmp,
        "--dev", "/dev",
        "--unshare-pid",
        "--proc", "/proc",
        "--bind", str(sandbox), str(sandbox),
        "--bind", str(home), str(home),
        "--chdir", str(sandbox),
        "--die-with-parent",
        "--new-session",
        "--",
        *cmd,
    ]  # fmt: skip
    return wrapped, "bwrap"
