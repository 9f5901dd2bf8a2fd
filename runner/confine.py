"""Per-rep confinement with bubblewrap, by allow-list: the rep sees only what it needs.

What the confined client sees (everything else does not exist for it):
- the system read-only: /usr (and the merged-/usr links /bin, /sbin, /lib*), and of /etc only
  what programs need to run and to reach the network (`ETC_ALLOWED`: name service, TLS roots,
  the dynamic loader's cache, alternatives, time zone; not shadow, ssh or machine secrets);
- read-only, each exact path: the client's install directory, the plugin, and the toolchains on
  PATH (a PATH entry under the real HOME binds that HOME's top-level entry, e.g. ~/.pyenv, since
  pyenv's shims need their neighbours, but ~/.local/bin binds only itself and ~/.local/lib; one
  elsewhere binds the entry's parent, e.g. /opt/x for /opt/x/bin). Nothing of the project checkout but the client and plugin inside it: not
  scenarios/ (the answer key), not archives, not the sources;
- writable: its own sandbox and its private HOME; a private /tmp capped at `tmp_size` bytes;
  nothing else (the root holding the mount points is remounted read-only);
- /dev (bwrap's minimal one), its own /proc in its own PID namespace (`--unshare-pid`): it cannot
  see or signal the recorder or read its environment; no /sys, /run, /var, /root, /home, /srv;
- the network as it is, so the loopback model (or the credential proxy) stays reachable; or, with
  `unshare_net` (`--network api-only`), none at all but the credential proxy's unix socket.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from evalb import paths
from evalb.errors import ConfinementError

NO_CONFINEMENT = "none (opted out)"
#: What `confinement` says for a confined rep, with and without the network.
BWRAP, BWRAP_NO_NETWORK = "bwrap", "bwrap (no network)"
BWRAP_MISSING = "bubblewrap (bwrap) is not installed, so reps cannot be confined"
BWRAP_HINT = (
    "install it (apt-get install bubblewrap; scripts/setup does) or pass --no-confine to run unconfined"
)
#: System directories bound read-only (a symlink such as /bin -> usr/bin is recreated as one).
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
#: What of /etc a rep sees: enough to run programs, resolve names and verify TLS.
ETC_ALLOWED = (
    "alternatives", "ssl", "ca-certificates", "ca-certificates.conf", "pki",
    "resolv.conf", "hosts", "host.conf", "nsswitch.conf", "gai.conf", "protocols", "services",
    "passwd", "group", "ld.so.cache", "ld.so.conf", "ld.so.conf.d",
    "localtime", "timezone", "os-release", "debian_version", "locale.alias", "locale.conf",
    "bash.bashrc", "profile", "inputrc", "environment", "mime.types", "magic", "terminfo",
    "gitconfig", "python3", "python3.11",
)  # fmt: skip


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


def require_bwrap() -> str:
    """The bwrap binary, or the one-line refusal the runner gives without it."""
    bwrap = bwrap_path()
    if not bwrap:
        raise ConfinementError(BWRAP_MISSING, hint=BWRAP_HINT)
    return bwrap


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def install_dir(binary: Path) -> Path:
    """What to bind for a client binary: its top `node_modules` directory (an npm install), else
    the directory holding it."""
    real = binary.resolve()
    tops = [p for p in real.parents if p.name == "node_modules"]
    return tops[-1] if tops else real.parent


def visible_paths(
    keep_visible: Iterable[Path], path_env: str, real_home: Path, hidden: Iterable[Path] = ()
) -> list[Path]:
    """The read-only binds a rep needs beyond the system: `keep_visible` (exact), and the toolchains
    on PATH. Never a path holding or inside `hidden` (the checkout), unless it is asked for exactly."""
    hidden = [h.resolve() for h in hidden]
    out: list[Path] = [Path(os.path.abspath(p)) for p in keep_visible if Path(p).exists()]
    for entry in (Path(p) for p in path_env.split(os.pathsep) if p):
        if not entry.is_absolute() or not entry.exists():
            continue
        real = entry.resolve()
        if any(_inside(real, Path(s).resolve()) for s in SYSTEM if Path(s).exists()):
            continue
        if real_home != Path("/") and real_home in real.parents:
            bind = real_home / real.relative_to(real_home).parts[0]
            if bind.name == ".local":  # ~/.local/share holds other programs' data (keyrings, logins)
                out += [p for p in (real_home / ".local" / "lib",) if p.is_dir()]
                bind = real
        else:
            bind = real.parent if real.name == "bin" else real
        if any(_inside(bind, h) or _inside(h, bind) for h in hidden):
            continue  # e.g. the checkout's .venv/bin: never a way into the project
        out.append(bind)
    uniq: list[Path] = []
    for p in sorted(dict.fromkeys(out), key=lambda p: len(p.parts)):
        if not any(_inside(p, q) for q in uniq):
            uniq.append(p)
    return uniq


def confine_command(
    cmd: list[str],
    *,
    sandbox: Path,
    home: Path,
    confine: bool,
    keep_visible: Iterable[Path] = (),
    real_home: Path | None = None,
    tmp_size: int | None = None,
    path_env: str | None = None,
    unshare_net: bool = False,
) -> tuple[list[str], str]:
    """Wrap `cmd` in bwrap (see the module doc). `keep_visible` are the exact paths the rep needs
    read-only (client install, plugin). `unshare_net`: no network but loopback (the API is then
    reached through the credential proxy's unix socket, which must be in `keep_visible`).
    Returns (command, confinement label)."""
    if not confine:
        return cmd, NO_CONFINEMENT
    bwrap = require_bwrap()
    real_home = (real_home or Path(os.path.expanduser("~"))).resolve()
    path_env = os.environ.get("PATH", "") if path_env is None else path_env
    args: list[str] = []
    for s in SYSTEM:
        p = Path(s)
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), s]
        elif p.is_dir():
            args += ["--ro-bind", s, s]
    for name in ETC_ALLOWED:
        p = Path("/etc") / name
        if p.exists():
            args += ["--ro-bind", str(p), str(p)]
    # after the private /tmp, so that a checkout (client, plugin) living under /tmp shows through it
    visible: list[str] = []
    for p in visible_paths(keep_visible, path_env, real_home, hidden=[paths.REPO_ROOT]):
        visible += ["--ro-bind", str(p), str(p)]
    size = ["--size", str(tmp_size)] if tmp_size else []
    wrapped = [
        bwrap,
        *args,
        *size, "--tmpfs", "/tmp",
        *visible,
        "--dev", "/dev",
        "--unshare-pid",
        *(["--unshare-net"] if unshare_net else []),
        "--proc", "/proc",
        "--bind", str(sandbox), str(sandbox),
        "--bind", str(home), str(home),
        # the new root (bwrap's tmpfs holding the mount points) read-only: no unbounded writes there
        "--remount-ro", "/",
        "--chdir", str(sandbox),
        "--die-with-parent",
        "--new-session",
        "--",
        *cmd,
    ]  # fmt: skip
    return wrapped, BWRAP_NO_NETWORK if unshare_net else BWRAP
