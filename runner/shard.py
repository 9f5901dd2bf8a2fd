"""Shards: split a grid's slots over N recorders (machines, pods, CI jobs) by a stable hash.

Shards are 0-based, `I/N` with 0 <= I < N, like Kubernetes' JOB_COMPLETION_INDEX. A slot's shard
is sha256 of 'variant|model|rep' modulo N: the arm and the plugin are left out, so every arm of
one (variant, model, rep) lands in the same shard and the arms stay interleaved there; the hash
does not depend on the Python process (never `hash()`), so every recorder agrees.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from evalb.errors import UsageError

ENV_INDEX = "JOB_COMPLETION_INDEX"
ENV_COUNT = "JOB_COMPLETION_COUNT"
_SPEC = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


@dataclass(frozen=True)
class Shard:
    """Shard `index` (0-based) of `count`."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def _shard(index: int, count: int, what: str) -> Shard:
    if count < 1:
        raise UsageError(f"{what}: the shard count must be at least 1, got {count}")
    if not 0 <= index < count:
        raise UsageError(
            f"{what}: shard index {index} is not in 0..{count - 1} (shards are 0-based, like JOB_COMPLETION_INDEX)"
        )
    return Shard(index, count)


def parse_shard(text: str) -> Shard:
    """`I/N` as given to --shard."""
    m = _SPEC.match(text)
    if not m:
        raise UsageError(f"--shard {text!r} is not I/N", hint="write e.g. --shard 0/4 (shards 0..3 of 4)")
    return _shard(int(m[1]), int(m[2]), f"--shard {text}")


def shard_from_env(env: Mapping[str, str]) -> Shard | None:
    """The shard a Kubernetes Indexed Job (or a CI matrix) gives through JOB_COMPLETION_INDEX and
    JOB_COMPLETION_COUNT; None when neither is set; one of them alone is a UsageError."""
    index, count = env.get(ENV_INDEX), env.get(ENV_COUNT)
    if index is None and count is None:
        return None
    if index is None or count is None:
        have, lack = (ENV_COUNT, ENV_INDEX) if index is None else (ENV_INDEX, ENV_COUNT)
        raise UsageError(
            f"{have} is set but {lack} is not",
            hint="set both (the count is the Job's completions), or pass --shard I/N",
        )
    if not (index.strip().isdigit() and count.strip().isdigit()):
        raise UsageError(f"{ENV_INDEX}={index!r} / {ENV_COUNT}={count!r} are not whole numbers")
    return _shard(int(index), int(count), f"{ENV_INDEX}={index.strip()}, {ENV_COUNT}={count.strip()}")


def resolve_shard(option: str | None, env: Mapping[str, str] | None = None) -> Shard | None:
    """--shard if given, else the environment's (None: the whole grid)."""
    if option is not None:
        return parse_shard(option)
    return shard_from_env(os.environ if env is None else env)


def shard_key(variant: str, model: str, rep: int) -> str:
    """What decides a slot's shard: its slot key without the plugin and the arm."""
    return f"{variant}|{model}|{rep}"


def shard_of(variant: str, model: str, rep: int, count: int) -> int:
    """The shard (0-based) of `count` that records this (variant, model, rep), for every arm."""
    digest = hashlib.sha256(shard_key(variant, model, rep).encode()).digest()
    return int.from_bytes(digest[:8], "big") % count


class _SlotLike(Protocol):
    @property
    def variant(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def rep(self) -> int: ...


S = TypeVar("S", bound=_SlotLike)


def select(slots: Sequence[S], shard: Shard | None) -> list[S]:
    """The slots of one shard, in the grid's order (all of them when `shard` is None)."""
    if shard is None:
        return list(slots)
    return [s for s in slots if shard_of(s.variant, s.model, s.rep, shard.count) == shard.index]
