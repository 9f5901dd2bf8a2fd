"""The sandbox's end state after a session, captured without trusting anything the agent left.

The sandbox is hostile input: the agent ran in it with every permission. So capture runs no git
(a sandbox's git config can name commands to run), follows no symlink, opens no FIFO, socket or
device, and reads no file whole. It walks the sandbox by directory file descriptors
(`os.scandir(fd)`, `lstat`), compares each entry with the *initial tree* the builder recorded
outside the sandbox (`evalb.sandbox.SandboxInfo.initial_tree`), and returns one row per entry that
was added, modified or deleted, plus a summary for `runs.capture_json`. Every cap it applies is
recorded there, every error is recorded per entry; nothing it meets raises. docs/archive.md
('Capture') documents the rows, flags and escaping.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import hashlib
import json
import os
import stat
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from evalb.sandbox import Entry, Tree
from evalb.schema import ArtifactRecord

_CHUNK = 1 << 20
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_SAMPLES = 20  # error messages and capped paths kept in the summary


@dataclass(frozen=True)
class Limits:
    """Caps on what one capture may cost; hitting one is recorded, never an error."""

    max_depth: int = 64  # directory levels below the sandbox root that are entered
    max_new_entries: int = 20_000  # entries not in the initial tree that are examined
    max_listed: int = 200_000  # directory entries listed in all (stops the walk)
    max_file_content: int = 1 << 20  # a file's text is kept only up to this size
    max_run_content: int = 8 << 20  # text kept for the whole run
    max_file_hash: int = 16 << 20  # a file is hashed only up to this size
    max_run_hash: int = 64 << 20  # bytes hashed for the whole run (files met smallest first)


@dataclass
class Capture:
    """The rows for the artifacts table and the summary for `runs.capture_json`."""

    rows: list[ArtifactRecord]
    summary: dict[str, Any]

    def summary_json(self) -> str:
        return json.dumps(self.summary, sort_keys=True)


def escape_name(name: str) -> tuple[str, bool]:
    """A file name or link target as archived: unchanged if it is UTF-8; otherwise its bytes with
    backslashes doubled and each undecodable byte written `\\xNN` (second value True). Lossless:
    `unescape_name` gives the bytes back."""
    try:
        name.encode("utf-8")
        return name, False
    except UnicodeEncodeError:
        raw = os.fsencode(name)
        return raw.replace(b"\\", b"\\\\").decode("utf-8", "backslashreplace"), True


def unescape_name(escaped: str) -> bytes:
    """The bytes of a name escaped by `escape_name` (one flagged 'name_escaped')."""
    return codecs.escape_decode(escaped.encode("utf-8"))[0]


def _kind(mode: int) -> tuple[str, str | None]:
    if stat.S_ISREG(mode):
        return "file", None
    if stat.S_ISDIR(mode):
        return "dir", None
    if stat.S_ISLNK(mode):
        return "symlink", None
    for test, flag in (
        (stat.S_ISFIFO, "fifo"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "chardev"),
        (stat.S_ISBLK, "blockdev"),
    ):
        if test(mode):
            return "special", flag
    return "special", "other"


@dataclass
class _Walk:
    run_id: str
    initial: Tree
    limits: Limits
    rows: list[ArtifactRecord] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    depth_capped: list[str] = field(default_factory=list)
    caps: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    n_errors: int = 0
    listed: int = 0
    new: int = 0
    truncated: bool = False
    content_bytes: int = 0
    hashed_bytes: int = 0
    compared_bytes: int = 0  # hashed to compare with the initial tree: not charged to max_run_hash
    pending: list[tuple[int, str, os.stat_result, Entry | None, int]] = field(default_factory=list)
    git: str = "absent"

    def cap(self, name: str, n: int = 1) -> None:
        self.caps[name] = self.caps.get(name, 0) + n

    def error(self, rel: str, e: BaseException) -> str:
        self.n_errors += 1
        msg = f"{escape_name(rel)[0]}: {type(e).__name__}: {e}"
        if len(self.errors) < _SAMPLES:
            self.errors.append(msg[:300])
        return f"error:{type(e).__name__}"

    # --- one entry ----------------------------------------------------------------------------
    def row(self, rel: str, kind: str, change: str, flags: list[str], **values: Any) -> None:
        path, escaped = escape_name(rel)
        if escaped:
            flags = ["name_escaped", *flags]
        fields: dict[str, Any] = {"mode": None, "size": None, "sha256": None, "link_target": None}
        self.rows.append(
            ArtifactRecord(
                run_id=self.run_id,
                path=path,
                kind=kind,  # type: ignore[arg-type]
                change=change,  # type: ignore[arg-type]
                content=values.pop("content", None),
                flags=flags,
                **(fields | values),
            )
        )

    def entry(self, dir_fd: int, name: str, rel: str, depth: int) -> int | None:
        """Examine one directory entry; return an open fd of it if the walk should enter it."""
        init = self.initial.get(rel)
        if init is None:
            self.new += 1
            if self.new > self.limits.max_new_entries:
                self.cap("max_new_entries")
                return None
        self.seen.add(rel)
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        kind, special = _kind(st.st_mode)
        mode = stat.S_IMODE(st.st_mode)
        change = "added" if init is None else "modified"
        if kind == "dir":
            enter = depth + 1 <= self.limits.max_depth
            flags = [] if enter else ["depth_cap"]
            if not enter:
                self.cap("max_depth")
                self.depth_capped.append(rel)
            if init is None or init.kind != "dir" or init.mode != mode or not enter:
                self.row(rel, "dir", change, flags, mode=mode, size=0)
            return os.open(name, _DIR_FLAGS, dir_fd=dir_fd) if enter else None
        if kind == "symlink":
            target, escaped = escape_name(os.readlink(name, dir_fd=dir_fd))
            if init is None or init.kind != "symlink" or init.target != target:
                flags = ["target_escaped"] if escaped else []
                self.row(rel, "symlink", change, flags, mode=mode, size=st.st_size, link_target=target)
            return None
        if kind == "special":
            self.row(rel, "special", change, [special or "other"], mode=mode, size=st.st_size)
            return None
        self.file(dir_fd, name, rel, st, init, mode)
        return None

    def file(
        self, dir_fd: int, name: str, rel: str, st: os.stat_result, init: Entry | None, mode: int
    ) -> None:
        """A regular file: compared with the initial tree at once when it has the same size and mode
        (cheap: bounded by the fixture's size); otherwise queued for `read_pending`."""
        if init is not None and init.kind == "file" and init.size == st.st_size and init.mode == mode:
            before = self.hashed_bytes
            digest, _, _ = self.read(dir_fd, name, st, keep=False)
            self.compared_bytes += self.hashed_bytes - before
            if digest is not None and digest == init.sha256:
                return
        self.pending.append((st.st_size, rel, st, init, mode))

    def read_pending(self, root_fd: int) -> None:
        """Read the queued files smallest first, so that big files (or many) cannot push the small
        ones, such as a new ADR, past the run's caps."""
        dirs = _Dirs(root_fd)
        try:
            for _, rel, st, init, mode in sorted(self.pending, key=lambda p: (p[0], p[1])):
                try:
                    dir_fd, name = dirs.parent(rel)
                    self.finish(dir_fd, name, rel, st, init, mode)
                except Exception as e:  # one entry never stops the capture
                    change = "unseen" if rel in self.initial else "added"
                    self.row(rel, "unknown", change, [self.error(rel, e)])
        finally:
            dirs.close()

    def finish(
        self, dir_fd: int, name: str, rel: str, st: os.stat_result, init: Entry | None, mode: int
    ) -> None:
        """Hash a changed or new file and keep its text, within the caps; one row."""
        lim = self.limits
        size = st.st_size
        flags: list[str] = []
        charged = self.hashed_bytes - self.compared_bytes
        hash_ok = size <= lim.max_file_hash and charged + size <= lim.max_run_hash
        if not hash_ok:
            self.cap("max_file_hash" if size > lim.max_file_hash else "max_run_hash")
            flags.append("hash_cap")
        want_text = hash_ok and size <= lim.max_file_content and st.st_nlink == 1
        if st.st_nlink > 1:
            flags.append("hardlink")  # may be a file outside the sandbox: its text is never kept
        digest, data = None, None
        if hash_ok:
            digest, data, read_flags = self.read(dir_fd, name, st, keep=want_text)
            flags += read_flags
        content = None
        if data is not None:
            if b"\0" in data:
                flags.append("binary")
            elif self.content_bytes + len(data) > lim.max_run_content:
                self.cap("max_run_content")
                flags.append("content_cap")
            else:
                self.content_bytes += len(data)
                content = data.decode("utf-8", errors="replace")
        elif hash_ok and size > lim.max_file_content:
            self.cap("max_file_content")
            flags.append("content_cap")
        change = "added" if init is None else "modified"
        self.row(rel, "file", change, flags, mode=mode, size=size, sha256=digest, content=content)

    def read(
        self, dir_fd: int, name: str, st: os.stat_result, *, keep: bool
    ) -> tuple[str | None, bytes | None, list[str]]:
        """Hash a regular file in chunks (its first bytes kept if `keep`), opened without following
        a link or blocking on a FIFO, and checked to be the very file that was examined."""
        fd = os.open(name, _OPEN_FLAGS, dir_fd=dir_fd)
        try:
            fst = os.fstat(fd)
            if not stat.S_ISREG(fst.st_mode) or (fst.st_dev, fst.st_ino) != (st.st_dev, st.st_ino):
                return None, None, ["swapped"]
            h = hashlib.sha256()
            kept = bytearray()
            left = st.st_size + 1  # one byte more shows a file that grew meanwhile
            while left > 0:
                chunk = os.read(fd, min(_CHUNK, left))
                if not chunk:
                    break
                left -= len(chunk)
                h.update(chunk)
                if keep and len(kept) < self.limits.max_file_content:
                    kept += chunk
            self.hashed_bytes += st.st_size + 1 - left
            if left <= 0:
                return None, None, ["changed_while_read"]
            return h.hexdigest(), bytes(kept) if keep else None, []
        finally:
            os.close(fd)

    # --- the walk -----------------------------------------------------------------------------
    def walk(self, root_fd: int) -> None:
        """Depth-first over directory fds: at most max_depth directories open at once."""
        stack: list[tuple[int, Iterator[os.DirEntry[str]], str, int]] = []
        stack.append((root_fd, iter(os.scandir(root_fd)), "", 0))
        try:
            while stack:
                fd, it, prefix, depth = stack[-1]
                try:
                    dentry = next(it, None)
                except OSError as e:
                    self.error(prefix or ".", e)
                    dentry = None
                if dentry is None:
                    stack.pop()
                    _close(it, fd if fd != root_fd else None)
                    continue
                self.listed += 1
                if self.listed > self.limits.max_listed:
                    self.truncated = True
                    self.cap("max_listed")
                    return
                name = dentry.name
                rel = f"{prefix}{name}"
                if depth == 0 and name == ".git":
                    self.git = self.git_kind(fd)
                    continue
                try:
                    child = self.entry(fd, name, rel, depth)
                except Exception as e:  # one entry never stops the walk
                    self.seen.add(rel)
                    change = "unseen" if rel in self.initial else "added"
                    self.row(rel, "unknown", change, [self.error(rel, e)])
                    continue
                if child is not None:
                    try:
                        stack.append((child, iter(os.scandir(child)), rel + "/", depth + 1))
                    except OSError as e:
                        os.close(child)
                        self.error(rel, e)
        finally:
            for fd, it, _, _ in stack:
                _close(it, fd if fd != root_fd else None)

    def git_kind(self, dir_fd: int) -> str:
        try:
            return _kind(os.stat(".git", dir_fd=dir_fd, follow_symlinks=False).st_mode)[0]
        except OSError as e:
            return self.error(".git", e)

    def missing(self) -> None:
        """Initial entries the walk did not meet: deleted, or unseen where a cap hid them."""
        capped = tuple(p + "/" for p in self.depth_capped)
        for rel, init in self.initial.items():
            if rel in self.seen:
                continue
            hidden = self.truncated or rel.startswith(capped)
            self.row(rel, init.kind, "unseen" if hidden else "deleted", [], size=None)

    def summary(self, seconds: float) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for r in self.rows:
            counts[r.change or ""] = counts.get(r.change or "", 0) + 1
        return {
            "method": "walk",
            "limits": asdict(self.limits),
            "initial_entries": len(self.initial),
            "listed": self.listed,
            "new_entries": self.new,
            "rows": len(self.rows),
            "changes": counts,
            "caps_hit": sorted(self.caps),
            "cap_counts": self.caps,
            "depth_capped": [escape_name(p)[0] for p in self.depth_capped[:_SAMPLES]],
            "content_bytes": self.content_bytes,
            "hashed_bytes": self.hashed_bytes,
            "special": sum(1 for r in self.rows if r.kind == "special"),
            "symlinks": sum(1 for r in self.rows if r.kind == "symlink"),
            "escaped_names": sum(1 for r in self.rows if "name_escaped" in r.flags),
            "git": self.git,
            "errors": self.n_errors,
            "error_samples": self.errors,
            "seconds": round(seconds, 4),
        }


class _Dirs:
    """Directory fds reopened from the root, component by component, never through a link (a few
    kept open: the queued files of one directory are read one after another)."""

    def __init__(self, root_fd: int, keep: int = 64) -> None:
        self.root = root_fd
        self.keep = keep
        self.open: OrderedDict[str, int] = OrderedDict()

    def parent(self, rel: str) -> tuple[int, str]:
        head, _, name = rel.rpartition("/")
        if not head:
            return self.root, name
        fd = self.open.get(head)
        if fd is not None:
            self.open.move_to_end(head)
            return fd, name
        fd = self.root
        for part in head.split("/"):
            nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            if fd != self.root:
                os.close(fd)
            fd = nfd
        self.open[head] = fd
        if len(self.open) > self.keep:
            os.close(self.open.popitem(last=False)[1])
        return fd, name

    def close(self) -> None:
        for fd in self.open.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self.open.clear()


def _close(it: Iterator[os.DirEntry[str]], fd: int | None) -> None:
    close = getattr(it, "close", None)
    if close is not None:
        close()
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


def collect(run_id: str, sandbox: Path, initial: Tree, limits: Limits | None = None) -> Capture:
    """Compare the sandbox at `sandbox` with `initial` (kept outside it); never raises for what the
    sandbox holds."""
    start = time.perf_counter()
    w = _Walk(run_id, initial, limits or Limits())
    try:
        root_fd = os.open(sandbox, _DIR_FLAGS)
    except OSError as e:
        w.error(".", e)
        w.truncated = e.errno != errno.ENOENT  # a missing sandbox lost everything; else unknown
    else:
        try:
            w.walk(root_fd)
        except Exception as e:  # a bug here must not lose the rep: record it
            w.error(".", e)
            w.truncated = True
        try:
            w.read_pending(root_fd)
        except Exception as e:
            w.error(".", e)
        finally:
            os.close(root_fd)
    try:
        w.missing()
    except Exception as e:
        w.error(".", e)
    w.rows.sort(key=lambda r: r.path)
    return Capture(w.rows, w.summary(time.perf_counter() - start))
