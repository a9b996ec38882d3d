"""The built-in search agent (DESIGN.md §7): no network, no keys, deterministic given a seed.

It tunes the kernel file's CONFIG within SEARCH_SPACE, in the spirit of tinygrad's BEAM search and
coordinate descent with random restarts:
1. coordinate descent around the current best: single-key moves, nearest values first (one step
   up/down every key, then two steps, ...); algorithm-variant keys (VARIANT, ALGO...) switch first,
   because a different algorithm moves time more than any tile size;
2. beam: the same moves around the next-best measured points of the same file family (the
   `BEAM_WIDTH` fastest verified configs), so a near-miss basin is explored too;
3. random restart: a random unmeasured point of the whole space.
A point is never measured twice: every candidate is checked against the run's measured hashes
(journal, across `--resume`). None once the whole space is measured.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from autokernel_ci.agents.base import Agent, AgentState, Proposal, family_hash
from autokernel_ci.kernelfile import KernelFile, KernelFileError

# How many of the fastest verified configs (besides the best) get coordinate moves: 3 keeps the
# agent near the best basin on a space of ~100-1000 points while still leaving it.
BEAM_WIDTH = 3
# Spaces up to this many points are enumerated for restarts; larger ones are sampled.
ENUMERATE_LIMIT = 4096
SAMPLE_TRIES = 256
VARIANT_MARKERS = ("VARIANT", "ALGO", "IMPL", "SCHEDULE")


def _is_variant_key(key: str, options: list[Any]) -> bool:
    return any(m in key.upper() for m in VARIANT_MARKERS) or any(isinstance(o, str) for o in options)


def describe(config: dict[str, Any], base: dict[str, Any] | None = None) -> str:
    """'BLOCK=2048 num_warps=8' for the keys that differ from `base` (all keys without one)."""
    keys = [k for k in config if base is None or base.get(k) != config[k]] or list(config)
    return " ".join(f"{k}={config[k]}" for k in keys)


class SearchAgent(Agent):
    name = "search"

    def __init__(self, seed: int = 0, beam_width: int = BEAM_WIDTH):
        self.seed = seed
        self.beam_width = beam_width

    # -- the moves ---------------------------------------------------------------------------------
    @staticmethod
    def _ordered_keys(kernel: KernelFile) -> list[str]:
        space = kernel.search_space
        return sorted(space, key=lambda k: (not _is_variant_key(k, space[k]), list(space).index(k)))

    def neighbours(self, kernel: KernelFile, config: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Single-key moves from `config`, nearest first (variant keys: every other variant at distance 1)."""
        space = kernel.search_space
        keys = self._ordered_keys(kernel)
        widest = max((len(v) for v in space.values()), default=0)
        for distance in range(1, widest):
            for key in keys:
                options = space[key]
                if _is_variant_key(key, options):
                    if distance == 1:
                        for option in options:
                            if option != config.get(key):
                                yield {**config, key: option}
                    continue
                here = options.index(config[key]) if config.get(key) in options else None
                if here is None:  # the current value is off the grid: every grid value is a move
                    if distance == 1:
                        for option in options:
                            yield {**config, key: option}
                    continue
                for step in (distance, -distance):
                    if 0 <= here + step < len(options):
                        yield {**config, key: options[here + step]}

    def _candidate(self, kernel: KernelFile, config: dict[str, Any], measured: set[str],
                   dtype: str | None = None) -> KernelFile | None:
        """The file at `config` with its knobs inactive there or at `dtype` canonical (KNOB_SCOPE), unless that
        kernel was measured."""
        try:
            cand = kernel.with_config(kernel.canonical(config, dtype))
        except KernelFileError:
            return None
        return None if cand.source_hash in measured else cand

    def _beam_bases(self, state: AgentState) -> list[dict[str, Any]]:
        family = family_hash(state.best)
        verified = [r for r in state.history
                    if r.get("family") == family and r.get("config") and r.get("median_us") is not None
                    and r.get("status") in ("kept", "reverted") and r.get("config") != state.best.config]
        verified.sort(key=lambda r: (r["median_us"], r["n"]))
        return [r["config"] for r in verified[: self.beam_width]]

    def _restart(self, state: AgentState, measured: set[str]) -> tuple[KernelFile, dict[str, Any]] | None:
        kernel = state.best
        rng = random.Random(f"{self.seed}:{state.op_id}:{len(measured)}")
        size = 1
        for options in kernel.search_space.values():
            size *= len(options)
        if size <= ENUMERATE_LIMIT:
            points = list(kernel.config_points())
            rng.shuffle(points)
            for cfg in points:
                cand = self._candidate(kernel, cfg, measured, state.dtype)
                if cand is not None:
                    return cand, cfg
            return None
        for _ in range(SAMPLE_TRIES):
            cfg = {**kernel.config, **{k: rng.choice(v) for k, v in kernel.search_space.items()}}
            cand = self._candidate(kernel, cfg, measured, state.dtype)
            if cand is not None:
                return cand, cfg
        return None

    # -- the interface -----------------------------------------------------------------------------
    def propose(self, state: AgentState) -> Proposal | None:
        kernel = state.best
        if not kernel.search_space:
            return None
        # The best as measured, and in canonical form: a move of a knob that has no effect there builds it again.
        canonical_best = kernel.with_config(kernel.canonical(kernel.config, state.dtype))
        measured = set(state.measured) | {kernel.source_hash, canonical_best.source_hash}
        for cfg in self.neighbours(kernel, kernel.config):
            cand = self._candidate(kernel, cfg, measured, state.dtype)
            if cand is not None:
                return self._proposal(cand, kernel, "descent")
        for base in self._beam_bases(state):
            for cfg in self.neighbours(kernel, base):
                cand = self._candidate(kernel, cfg, measured, state.dtype)
                if cand is not None:
                    return self._proposal(cand, kernel, "beam")
        found = self._restart(state, measured)
        if found is None:
            return None
        return self._proposal(found[0], kernel, "restart")

    def _proposal(self, cand: KernelFile, kernel: KernelFile, how: str) -> Proposal:
        return Proposal(cand.source, f"{describe(cand.config, kernel.config)} ({how})", config=cand.config,
                        agent=self.name)
