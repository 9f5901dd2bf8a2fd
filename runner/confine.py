"""Per-rep confinement with bubblewrap: the agent may write only its sandbox, its HOME and a private /tmp."""

from __future__ import annotations

import shutil
from pathlib import Path

from evalb.errors import ConfinementError

NO_CONFINEMENT = "none (opted out)"


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


def confine_command(cmd: list[str], *, sandbox: Path, home: Path, confine: bool) -> tuple[list[str], str]:
    """Wrap `cmd` in bwrap (read-only root, writable sandbox + HOME, tmpfs /tmp, network kept so
    the loopback model and the real API stay reachable). Returns (command, confinement label)."""
    if not confine:
        return cmd, NO_CONFINEMENT
    bwrap = bwrap_path()
    if not bwrap:
        raise ConfinementError(
            "bubblewrap (bwrap) is not installed, so reps cannot be confined",
            hint="install it (apt-get install bubblewrap; scripts/setup does) or pass --no-confine to run unconfined",
        )
    wrapped = [
        bwrap,
        "--ro-bind", "/", "/",
        "--tmpfs", "/tmp",
        "--dev", "/dev",
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
