"""The built-in search agent on real starter files: coordinate descent, beam, restarts, no repeats."""

from __future__ import annotations

import pytest

from autokernel_ci.agents.base import AgentState, config_hash, family_hash
from autokernel_ci.agents.search import SearchAgent
from autokernel_ci.kernelfile import load, parse
from autokernel_ci.paths import starter_kernel
from autokernel_ci.specs import KERNEL_TYPES

SMALL = '''"""A tiny kernel file with a 3 x 3 x 2 space (search tests only)."""
import torch

KERNEL_TYPE = "reduce"
BACKEND = "triton"
CONFIG = {"VARIANT": "a", "BLOCK": 64, "num_warps": 4}
SEARCH_SPACE = {"BLOCK": [32, 64, 128], "VARIANT": ["a", "b", "c"], "num_warps": [4, 8]}


def kernel_fn(x):
    return x.sum(-1)
'''


def _state(kernel, history=(), measured=(), seed=0, op_id="op-0", dtype="bf16") -> AgentState:
    return AgentState(op_id=op_id, kernel_type=kernel.kernel_type, dtype=dtype, shapes=[], best=kernel,
                      n=len(history) + 1, seed=seed, history=list(history),
                      measured=set(measured) | {config_hash(kernel)})


def _drive(kernel, steps: int, seed: int = 0, speed=None, dtype: str = "bf16"):
    """Run the agent against a pretend clock: `speed(config)` gives the time, lower is kept as best."""
    agent = SearchAgent(seed=seed)
    history, measured, seen = [], set(), []
    best, best_t = kernel, speed(kernel.config) if speed else 1.0
    for n in range(1, steps + 1):
        proposal = agent.propose(_state(best, history, measured, seed, dtype=dtype))
        if proposal is None:
            break
        cand = parse(proposal.source)
        seen.append(cand.source_hash)
        t = speed(cand.config) if speed else 1.0 + n
        status = "kept" if t < best_t else "reverted"
        history.append({"n": n, "status": status, "median_us": t, "config": proposal.config,
                        "family": family_hash(cand), "source_hash": cand.source_hash})
        measured |= {cand.source_hash, config_hash(cand)}
        if status == "kept":
            best, best_t = cand, t
    return seen, best, best_t


def test_variant_key_moves_first():
    kernel = parse(SMALL)
    proposal = SearchAgent().propose(_state(kernel))
    assert proposal.config["VARIANT"] != "a" and proposal.config["BLOCK"] == 64
    assert "VARIANT=" in proposal.idea and "(descent)" in proposal.idea


def test_whole_space_is_measured_once_then_none():
    kernel = parse(SMALL)
    seen, _, _ = _drive(kernel, 100)
    assert len(seen) == len(set(seen)) == 3 * 3 * 2 - 1  # every point but the starter's own, once
    assert {parse(SMALL).with_config(c).source_hash for c in kernel.config_points()} - set(seen) == {
        config_hash(kernel)}


def test_descent_finds_the_optimum_of_a_separable_cost():
    kernel = parse(SMALL)
    cost = {"BLOCK": {32: 3.0, 64: 2.0, 128: 1.0}, "VARIANT": {"a": 3.0, "b": 0.5, "c": 2.0},
            "num_warps": {4: 1.0, 8: 0.2}}

    def speed(cfg):
        return sum(cost[k][cfg[k]] for k in cost)

    seen, best, best_t = _drive(kernel, 12, speed=speed)
    assert best.config == {"VARIANT": "b", "BLOCK": 128, "num_warps": 8}
    assert best_t == pytest.approx(1.7)
    assert len(seen) <= 12


@pytest.mark.parametrize("kernel_type", KERNEL_TYPES)
def test_starters_are_searchable_and_deterministic(kernel_type):
    kernel = load(starter_kernel(kernel_type))
    first, _, _ = _drive(kernel, 6, seed=7)
    again, _, _ = _drive(kernel, 6, seed=7)
    assert first == again and len(first) == len(set(first)) >= 1
    assert config_hash(kernel) not in first


def test_restart_depends_on_seed_only():
    kernel = parse(SMALL)
    measured = {kernel.with_config(c).source_hash for c in SearchAgent().neighbours(kernel, kernel.config)}
    a = SearchAgent(seed=1).propose(_state(kernel, measured=measured))
    b = SearchAgent(seed=1).propose(_state(kernel, measured=measured))
    assert a.source == b.source and "(restart)" in a.idea
    others = {SearchAgent(seed=s).propose(_state(kernel, measured=measured)).source for s in range(8)}
    assert len(others) > 1


def test_beam_explores_around_a_near_miss():
    kernel = parse(SMALL)
    near = {"VARIANT": "c", "BLOCK": 64, "num_warps": 4}
    neighbours = list(SearchAgent().neighbours(kernel, kernel.config))
    measured = {kernel.with_config(c).source_hash for c in neighbours}
    history = [{"n": 1, "status": "reverted", "median_us": 1.1, "config": near, "family": family_hash(kernel),
                "source_hash": kernel.with_config(near).source_hash}]
    proposal = SearchAgent().propose(_state(kernel, history, measured))
    assert "(beam)" in proposal.idea
    moved = {k for k in near if proposal.config[k] != near[k]}
    assert len(moved) == 1  # one coordinate away from the near miss


def test_file_without_search_space_gives_none():
    kernel = parse(SMALL.replace('SEARCH_SPACE = {"BLOCK": [32, 64, 128], "VARIANT": ["a", "b", "c"], '
                                 '"num_warps": [4, 8]}', "SEARCH_SPACE = {}"))
    assert SearchAgent().propose(_state(kernel)) is None


def test_moves_of_an_inactive_knob_are_not_measured():
    """KNOB_SCOPE: num_warps acts only with VARIANT "c"; the agent measures each distinct kernel once."""
    scope = 'KNOB_SCOPE = {"num_warps": {"VARIANT": ["c"]}}\n'
    source = SMALL.replace('"num_warps": [4, 8]}\n', '"num_warps": [4, 8]}\n' + scope)
    kernel = parse(source)
    seen, _, _ = _drive(kernel, 100)
    canonical = {kernel.with_config(kernel.canonical(p)).source_hash for p in kernel.config_points()}
    assert len(canonical) == 3 * 2 + 2 * 3  # VARIANT c: 3 BLOCK x 2 num_warps; a and b: 3 BLOCK each
    assert len(seen) == len(set(seen)) == len(canonical) - 1  # every distinct kernel but the starter's, once
    assert set(seen) <= canonical  # each proposal written in canonical form


@pytest.mark.parametrize(("dtype", "distinct", "tiles"),
                         [("bf16", 3 * 3 * 2, {128}), ("fp32", 3 * 3 * 2 * 2, {64, 128})])
def test_a_knob_idle_at_the_runs_dtype_is_never_moved(dtype: str, distinct: int, tiles: set[int]):
    """KNOB_SCOPE's "dtype": F32_TILE acts only at fp32. A bf16 run measures each bf16 kernel once and leaves the
    file's fp32 setting (128, not the space's first value) on every proposal; an fp32 run moves it too."""
    scope = 'KNOB_SCOPE = {"F32_TILE": {"dtype": ["fp32"]}}\n'
    source = SMALL.replace('CONFIG = {"VARIANT": "a", "BLOCK": 64, "num_warps": 4}',
                           'CONFIG = {"VARIANT": "a", "BLOCK": 64, "num_warps": 4, "F32_TILE": 128}')
    kernel = parse(source.replace('"num_warps": [4, 8]}\n', '"num_warps": [4, 8], "F32_TILE": [64, 128]}\n' + scope))
    agent, history, measured, configs = SearchAgent(), [], set(), []
    for n in range(1, 100):
        proposal = agent.propose(_state(kernel, history, measured, dtype=dtype))
        if proposal is None:
            break
        cand = parse(proposal.source)
        configs.append(cand.config)
        history.append({"n": n, "status": "reverted", "median_us": 1.0 + n, "config": cand.config,
                        "family": family_hash(cand), "source_hash": cand.source_hash})
        measured |= {cand.source_hash, config_hash(cand)}
    assert len(configs) == len({tuple(sorted(c.items())) for c in configs}) == distinct - 1  # each kernel once
    assert {c["F32_TILE"] for c in configs} == tiles
