"""Per-rep resource limits: memory, processes, /tmp size and file size, and a reliable end of the rep.

Each rep gets its own cgroup (v1: a `memory` and a `pids` group under the recorder's own; v2: one
group under the recorder's own, where that is delegated) with memory and process caps; the
client joins it before exec (`RepGuard.preexec`), so every process the agent starts, `setsid` or
not, is in it, and `RepGuard.close` kills them all at the rep's end and removes the groups.
Where no cgroup is writable, the process cap falls back to RLIMIT_NPROC (which does not bind
root) and memory is not limited; the record says so. The file-size cap is RLIMIT_FSIZE (a write
past it gets SIGXFSZ/EFBIG, root included); /tmp's cap is the size of the confined rep's private
tmpfs (see runner.confine), watched from outside through the rep's mount namespace.

After the rep, `RepGuard.hit()` names a limit the rep ran into (an OOM kill in its cgroup, a fork
refused at pids.max, /tmp full, a file at the size cap), read from kernel counters and the file
system, never from the transcript: the run is then recorded as `resource_limit`.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import signal
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from evalb.errors import UsageError

CGROUP_ROOT = Path("/sys/fs/cgroup")
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str, what: str) -> int | None:
    """'4G', '512M', '1048576', or 'none' (no limit) -> bytes; a user error otherwise."""
    s = text.strip().upper().removesuffix("IB").removesuffix("B")
    if s in ("NONE", "0", "OFF", "UNLIMITED"):
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]?)", s)
    if not m:
        raise UsageError(f"{what} {text!r} is not a size", hint="write e.g. 4G, 512M, 100K, or none")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def human(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % (size // 16 or 1) == 0:
            return f"{n / size:g} {unit}"
    return f"{n} bytes"


@dataclass(frozen=True)
class Limits:
    """Caps for one rep (None: no cap). Defaults: 4 GiB memory, 512 processes, 512 MiB /tmp, 1 GiB files."""

    memory: int | None = 4 << 30
    pids: int | None = 512
    tmp: int | None = 512 << 20
    file_size: int | None = 1 << 30


def _own_cgroup(controller: str) -> Path | None:
    """The recorder's own cgroup directory for `controller` (v1), or its v2 group ('' controller)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, ctrls, path = line.split(":", 2)
        if (controller and controller in ctrls.split(",")) or (not controller and ctrls == ""):
            base = CGROUP_ROOT / controller if controller else CGROUP_ROOT
            return base / path.lstrip("/")
    return None


def _write(path: Path, value: str) -> None:
    path.write_text(value)


class RepGuard:
    """The limits of one rep: set up (`open`), joined by the client (`preexec`), judged (`hit`), ended
    (`close`: every process killed, the groups removed). `enforced` says how each limit is held."""

    def __init__(self, limits: Limits, *, confined: bool) -> None:
        self.limits = limits
        self.confined = confined
        self.groups: list[Path] = []  # cgroup dirs this rep joins
        self.enforced: dict[str, str] = {}
        self._mem: Path | None = None
        self._pids: Path | None = None
        self._v2 = False
        self._rlimits: list[tuple[int, int]] = []
        self._tmp_fd: int | None = None
        self._tmp_peak = 0
        self._tmp_full = False
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None

    # -- set-up -------------------------------------------------------------------------------------
    def open(self) -> RepGuard:
        name = f"evalb-{uuid.uuid4().hex[:12]}"
        lim = self.limits
        v2 = (CGROUP_ROOT / "cgroup.controllers").is_file()
        if v2:
            self._open_v2(name)
        else:
            if lim.memory is not None:
                self._mem = self._mkgroup("memory", name)
            self._pids = self._mkgroup("pids", name)
        if lim.memory is not None:
            if self._mem is not None and self._set_mem(self._mem, lim.memory):
                self.enforced["memory"] = f"{human(lim.memory)} (cgroup {'v2' if v2 else 'v1'})"
            else:
                self.enforced["memory"] = "not enforced (no writable memory cgroup)"
        if lim.pids is not None:
            if self._pids is not None and self._try_write(self._pids / "pids.max", str(lim.pids)):
                self.enforced["pids"] = f"{lim.pids} (cgroup {'v2' if v2 else 'v1'})"
            elif os.geteuid() != 0:
                self._rlimits.append((resource.RLIMIT_NPROC, lim.pids))
                self.enforced["pids"] = f"{lim.pids} (RLIMIT_NPROC, counts all the user's processes)"
            else:
                self.enforced["pids"] = (
                    "not enforced (no writable pids cgroup; RLIMIT_NPROC does not bind root)"
                )
        if lim.file_size is not None:
            self._rlimits.append((resource.RLIMIT_FSIZE, lim.file_size))
            self.enforced["file_size"] = f"{human(lim.file_size)} (RLIMIT_FSIZE)"
        if lim.tmp is not None:
            self.enforced["tmp"] = (
                f"{human(lim.tmp)} (private tmpfs)"
                if self.confined
                else "not enforced (unconfined: host /tmp)"
            )
        self.enforced["kill"] = "cgroup" if self.groups else "process group"
        return self

    def _mkgroup(self, controller: str, name: str) -> Path | None:
        parent = _own_cgroup(controller)
        if parent is None:
            return None
        _sweep(parent)
        path = parent / name
        try:
            path.mkdir()
        except OSError:
            return None
        self.groups.append(path)
        return path

    def _open_v2(self, name: str) -> None:
        group = self._mkgroup("", name)
        if group is None:
            return
        self._v2 = True
        try:
            ctrls = (group / "cgroup.controllers").read_text().split()
        except OSError:
            ctrls = []
        self._mem = group if "memory" in ctrls else None
        self._pids = group if "pids" in ctrls else None

    def _set_mem(self, group: Path, limit: int) -> bool:
        if self._v2:
            ok = self._try_write(group / "memory.max", str(limit))
            self._try_write(group / "memory.swap.max", "0")
            return ok
        ok = self._try_write(group / "memory.limit_in_bytes", str(limit))
        if ok and (group / "memory.memsw.limit_in_bytes").exists():
            self._try_write(group / "memory.memsw.limit_in_bytes", str(limit))
        return ok

    @staticmethod
    def _try_write(path: Path, value: str) -> bool:
        try:
            _write(path, value)
            return True
        except OSError:
            return False

    # -- in the client's child, between fork and exec -----------------------------------------------
    def preexec(self) -> None:  # pragma: no cover - runs in the child
        pid = str(os.getpid())
        for g in self.groups:
            with contextlib.suppress(OSError):
                _write(g / "cgroup.procs", pid)
        for which, value in self._rlimits:
            with contextlib.suppress(OSError, ValueError):
                resource.setrlimit(which, (value, value))

    # -- during the rep: watch the confined /tmp -----------------------------------------------------
    def watch_tmp(self) -> None:
        """Watch the rep's private /tmp (found through a process of the rep in another mount
        namespace) so that `hit` can say it filled up, even if the agent emptied it afterwards."""
        if not self.confined or self.limits.tmp is None or not self.groups:
            return
        self._watcher = threading.Thread(target=self._watch, name="evalb-tmp-watch", daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        own_ns = os.readlink("/proc/self/ns/mnt")
        while not self._stop.wait(0.2):
            if self._tmp_fd is None:
                self._tmp_fd = self._find_tmp(own_ns)
                continue
            with contextlib.suppress(OSError):
                self._sample()

    def _find_tmp(self, own_ns: str) -> int | None:
        """A handle on the rep's /tmp: only once it is the capped tmpfs (while bwrap is still setting
        up, /proc/PID/root/tmp can be the host's /tmp)."""
        assert self.limits.tmp is not None
        want = -(-self.limits.tmp // 4096) * 4096
        for pid in self.pids():
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/ns/mnt") == own_ns:
                    continue
                fd = os.open(f"/proc/{pid}/root/tmp", os.O_RDONLY | os.O_DIRECTORY)
                st = os.fstatvfs(fd)
                if abs(st.f_blocks * st.f_frsize - want) <= 2 * 4096:
                    return fd
                os.close(fd)
        return None

    def _sample(self) -> None:
        assert self._tmp_fd is not None
        st = os.fstatvfs(self._tmp_fd)
        used = (st.f_blocks - st.f_bfree) * st.f_frsize
        self._tmp_peak = max(self._tmp_peak, used)
        if st.f_bavail * st.f_frsize < max(st.f_blocks * st.f_frsize // 100, 64 << 10):
            self._tmp_full = True

    # -- after the rep ---------------------------------------------------------------------------------
    def pids(self) -> list[int]:
        out: set[int] = set()
        for g in self.groups:
            with contextlib.suppress(OSError):
                out.update(int(p) for p in (g / "cgroup.procs").read_text().split())
        return sorted(out)

    def kill_all(self, within: float = 5.0) -> int:
        """SIGKILL every process left in the rep's groups (a `setsid` child too); how many there were."""
        if not self.groups:
            return 0
        killed: set[int] = set()
        deadline = time.monotonic() + within
        for g in self.groups:
            if (g / "cgroup.kill").exists():
                self._try_write(g / "cgroup.kill", "1")
        while (left := self.pids()) and time.monotonic() < deadline:
            for pid in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
                    killed.add(pid)
            time.sleep(0.02)
        return len(killed)

    def hit(self, sandbox_dirs: tuple[Path, ...] = ()) -> str | None:
        """The limit the rep ran into, as a line for outcome_detail, or None."""
        self._stop.set()
        if self._tmp_fd is not None:
            with contextlib.suppress(OSError):
                self._sample()
        lim = self.limits
        if self._mem is not None and lim.memory is not None and self._count(self._mem, "oom_kill") > 0:
            return f"memory limit ({human(lim.memory)}) reached: the kernel killed a process of the rep"
        if self._pids is not None and lim.pids is not None and self._count(self._pids, "max") > 0:
            return f"process limit ({lim.pids}) reached: a fork was refused"
        if self._tmp_full and lim.tmp is not None:
            return f"/tmp limit ({human(lim.tmp)}) reached: the private /tmp filled up"
        if lim.file_size is not None:
            for d in sandbox_dirs:
                big = _file_at(d, lim.file_size)
                if big is not None:
                    return f"file size limit ({human(lim.file_size)}) reached: {big.name} stopped at the cap"
        return None

    def peaks(self) -> dict[str, int]:
        """What the rep used at most: memory (bytes), processes/threads, /tmp (bytes)."""
        out: dict[str, int] = {}
        files = (
            [("memory", self._mem, "memory.peak"), ("pids", self._pids, "pids.peak")]
            if self._v2
            else [("memory", self._mem, "memory.max_usage_in_bytes"), ("pids", self._pids, "pids.peak")]
        )
        for key, group, name in files:
            with contextlib.suppress(OSError, ValueError, TypeError):
                out[key] = int((group / name).read_text().split()[0])  # type: ignore[operator]
        if self._tmp_fd is not None or self._tmp_peak:
            out["tmp"] = self._tmp_peak
        return out

    def _count(self, group: Path, key: str) -> int:
        files = (
            {"oom_kill": "memory.events", "max": "pids.events"}
            if self._v2
            else {"oom_kill": "memory.oom_control", "max": "pids.events"}
        )
        try:
            text = (group / files[key]).read_text()
        except OSError:
            return 0
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == key:
                return int(parts[1])
        return 0

    def close(self) -> None:
        """Kill what is left and remove the groups (idempotent)."""
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(timeout=2)
        if self._tmp_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._tmp_fd)
            self._tmp_fd = None
        self.kill_all()
        for g in reversed(self.groups):
            for _ in range(50):
                try:
                    g.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)
        self.groups = []

    def __enter__(self) -> RepGuard:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _sweep(parent: Path, age: float = 60.0) -> None:
    """Remove empty `evalb-*` groups left by a recorder that was killed (older than `age` seconds:
    a younger one may be a rep's whose client has not joined it yet; a busy one cannot be removed)."""
    with contextlib.suppress(OSError):
        for g in parent.glob("evalb-*"):
            with contextlib.suppress(OSError):
                if time.time() - g.stat().st_mtime > age and not (g / "cgroup.procs").read_text().strip():
                    g.rmdir()


def _file_at(root: Path, size: int, budget: int = 20000) -> Path | None:
    """A regular file under `root` exactly at the file-size cap (a write past it was refused).

    Iterative (an agent's tree may be thousands of levels deep), never follows a link, and gives up
    after `budget` entries."""
    stack, seen = [str(root)], 0
    while stack:
        with contextlib.suppress(OSError), os.scandir(stack.pop()) as it:
            for entry in it:
                seen += 1
                if seen > budget:
                    return None
                with contextlib.suppress(OSError):
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    elif (
                        entry.is_file(follow_symlinks=False)
                        and entry.stat(follow_symlinks=False).st_size >= size
                    ):
                        return Path(entry.path)
    return None
