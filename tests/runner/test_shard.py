"""Shards: a stable hash of variant|model|rep partitions any grid's slots over N recorders, every arm
of one (variant, model, rep) in the same shard and in the grid's interleaved order."""

from __future__ import annotations

import hashlib
import random
import subprocess
import sys
from pathlib import Path

import pytest

from evalb import paths
from evalb.errors import UsageError
from evalb.scenarios import all_variant_ids
from runner.grid import Arm, expand, expand_arms
from runner.shard import Shard, parse_shard, resolve_shard, select, shard_from_env, shard_of
from tests.cli.helpers import call

VARIANTS = all_variant_ids()
MODELS = ["scripted:oracle", "scripted:oblivious", "scripted:stochastic", "scripted:stochastic:p_consult=0.1"]


def _random_grid(rng: random.Random) -> tuple[list[str], list[str], list[int], list[Arm]]:
    variants = rng.sample(VARIANTS, rng.randint(1, len(VARIANTS)))
    models = rng.sample(MODELS, rng.randint(1, len(MODELS)))
    start = rng.choice([0, 0, 5, 30])
    reps = list(range(start, start + rng.randint(1, 12)))
    arms = [
        Arm(n, paths.REFERENCE_PLUGIN if n != "none" else None)
        for n in rng.sample(["a", "b", "c", "none"], rng.randint(1, 4))
    ]
    return variants, models, reps, arms


def test_shards_partition_the_slots_of_any_grid() -> None:
    """Seeded property test over 300 random grids (variants, models, rep ranges, arms, seeds) and
    N in 1..17: every slot is in exactly one shard, each shard keeps the grid's order, and all
    arms of one (variant, model, rep) share a shard."""
    rng = random.Random(20261201)
    for _ in range(300):
        variants, models, reps, arms = _random_grid(rng)
        slots = expand_arms(variants, models, reps, arms, seed=rng.randrange(2**31))
        n = rng.randint(1, 17)
        parts = [select(slots, Shard(i, n)) for i in range(n)]
        keys = [s.key for p in parts for s in p]
        assert sorted(keys) == sorted(s.key for s in slots) and len(set(keys)) == len(slots)
        for p in parts:
            positions = [s.position for s in p]
            assert positions == sorted(positions)  # the grid's interleaved order, thinned
        owner: dict[tuple[str, str, int], int] = {}
        for i, p in enumerate(parts):
            for s in p:
                assert owner.setdefault((s.variant, s.model, s.rep), i) == i


def test_one_plugin_grids_partition_too() -> None:
    slots = expand(["all"], MODELS, 20, "0" * 64)
    for n in (1, 2, 3, 7):
        parts = [select(slots, Shard(i, n)) for i in range(n)]
        assert sorted(s.key for p in parts for s in p) == sorted(s.key for s in slots)


def test_the_hash_is_sha256_and_stable_across_processes() -> None:
    """Not Python's hash(): another interpreter (another PYTHONHASHSEED) agrees, and the value is
    sha256 of 'variant|model|rep' modulo N."""
    digest = hashlib.sha256(b"R1|scripted:oracle|3").digest()
    assert shard_of("R1", "scripted:oracle", 3, 7) == int.from_bytes(digest[:8], "big") % 7
    code = (
        "from runner.shard import shard_of; print([shard_of('R2', m, r, 5) for m in 'ab' for r in range(9)])"
    )
    here = [shard_of("R2", m, r, 5) for m in "ab" for r in range(9)]
    for seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True,
            env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"}, cwd=paths.REPO_ROOT,
        )  # fmt: skip
        assert out.stdout.strip() == str(here)


def test_shards_are_balanced_enough() -> None:
    """1,000 (variant, model, rep) over 4 shards: none is empty or holds more than a third."""
    counts = [0] * 4
    for r in range(125):
        for v in VARIANTS:
            counts[shard_of(v, "haiku", r, 4)] += 1
    assert min(counts) > 0 and max(counts) < sum(counts) / 3


@pytest.mark.parametrize(
    ("text", "shard"), [("0/1", Shard(0, 1)), ("3/4", Shard(3, 4)), (" 2 / 10 ", Shard(2, 10))]
)
def test_parse_shard(text: str, shard: Shard) -> None:
    assert parse_shard(text) == shard and str(shard) == f"{shard.index}/{shard.count}"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("4/4", "shard index 4 is not in 0..3 (shards are 0-based"),
        ("1/0", "the shard count must be at least 1"),
        ("1", "is not I/N"),
        ("-1/4", "is not I/N"),
        ("a/b", "is not I/N"),
    ],
)
def test_bad_shard_option(text: str, message: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_shard(text)
    assert message in err.value.one_line()


def test_shard_from_the_environment() -> None:
    assert shard_from_env({}) is None
    assert shard_from_env({"JOB_COMPLETION_INDEX": "2", "JOB_COMPLETION_COUNT": "3"}) == Shard(2, 3)
    # --shard wins over the environment
    env = {"JOB_COMPLETION_INDEX": "2", "JOB_COMPLETION_COUNT": "3"}
    assert resolve_shard("0/2", env) == Shard(0, 2) and resolve_shard(None, env) == Shard(2, 3)
    bad = [
        ({"JOB_COMPLETION_COUNT": "3"}, "JOB_COMPLETION_COUNT is set but JOB_COMPLETION_INDEX is not"),
        ({"JOB_COMPLETION_INDEX": "0"}, "JOB_COMPLETION_INDEX is set but JOB_COMPLETION_COUNT is not"),
        ({"JOB_COMPLETION_INDEX": "3", "JOB_COMPLETION_COUNT": "3"}, "shard index 3 is not in 0..2"),
        ({"JOB_COMPLETION_INDEX": "x", "JOB_COMPLETION_COUNT": "3"}, "are not whole numbers"),
    ]
    for env, message in bad:
        with pytest.raises(UsageError) as err:
            shard_from_env(env)
        assert message in err.value.one_line(), env


def test_cli_shard_mistakes_are_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    archive = tmp_path / "a"
    res = call("evalb-record", "run", "R1", "scripted:oracle", "--archive", archive, "--shard", "5/2")
    assert res.code == 2 and res.lines[0].startswith("error: --shard 5/2: shard index 5 is not in 0..1"), (
        res.err
    )
    monkeypatch.setenv("JOB_COMPLETION_COUNT", "4")
    monkeypatch.delenv("JOB_COMPLETION_INDEX", raising=False)
    grid = tmp_path / "g.yaml"
    grid.write_text("scenarios: [R1]\nmodels: [scripted:oracle]\n")
    res = call("evalb-record", "grid", grid, "--archive", archive)
    assert res.code == 2 and "JOB_COMPLETION_COUNT is set but JOB_COMPLETION_INDEX is not" in res.lines[0]
    assert not archive.exists()
