"""The mbarrier protocol of the Triton attention's warp-specialised Gluon kernel (kernels/triton/flash_attention.py,
VARIANT "gluon_ws"), stepped on the CPU under random interleavings.

The kernel's three partitions are written here as generators in the kernel's own order, with its parity
formulas: the load warp (_gl_ws_loader) and the two consumer warpgroups (_gl_ws_consumer). A generator yields
("wait", barrier, parity) where the kernel calls mbarrier.wait, and ("step", None, None) where other partitions
may act in between (the epilogue); everything between two yields is one atomic step.
A random scheduler runs whichever partition may proceed. Checked: nothing deadlocks; a consumer reads key block c
from stage c % STAGES only when both its copies have landed; the loader never refills a stage a consumer's wgmma
may still read, nor q's buffer while a consumer still reads q or stores its output from it; with PINGPONG the
warpgroups' wgmma batches strictly alternate. The GPU tests run the kernel itself (AUTOKERNEL_TEST_DEVICE=cuda).
"""

from __future__ import annotations

import random

import pytest


class Barriers:
    """mbarriers: a phase completes when every expected contribution of the phase has arrived (arrival count
    and, for TMA targets, the landed copies); try_wait.parity P passes once the phase of parity P completed."""

    def __init__(self, need: dict) -> None:
        self.need = need
        self.phase = dict.fromkeys(need, 0)
        self.pending: dict = {bar: set() for bar in need}

    def arrive(self, bar, what) -> None:
        assert what not in self.pending[bar], f"{what} arrives twice on {bar} in one phase"
        self.pending[bar].add(what)
        if self.pending[bar] == self.need[bar]:
            self.pending[bar], self.phase[bar] = set(), self.phase[bar] + 1

    def passed(self, bar, parity: int) -> bool:
        return self.phase[bar] % 2 != parity


class Kernel:
    def __init__(self, tiles: list[int], stages: int, pingpong: bool) -> None:
        self.tiles, self.stages, self.pingpong = tiles, stages, pingpong
        need = {("full", s): {"armed", "k", "v"} for s in range(stages)}
        need |= {("empty", s): {0, 1} for s in range(stages)}
        need |= {"q_full": {"armed", "q0", "q1"}, "q_empty": {0, 1}, ("turn", 0): {1}, ("turn", 1): {0}}
        self.bars = Barriers(need)
        self.stage_holds = [None] * stages  # the key block a stage holds
        self.stage_readers = [set() for _ in range(stages)]  # consumers whose wgmma may still read it
        self.q_holds, self.q_users = None, set()
        self.issued: list[tuple[int, int]] = []  # (warpgroup, batch) in issue order

    def loader(self):
        ring = done = 0
        for tile, n_blocks in enumerate(self.tiles):
            q_after = min(n_blocks, self.stages) - 1
            for j in range(n_blocks):
                stage = (ring + j) % self.stages
                if ring + j >= self.stages:
                    yield ("wait", ("empty", stage), (((ring + j) // self.stages) - 1) & 1)
                    assert self.bars.phase[("empty", stage)] == (ring + j) // self.stages, "parity wait is ambiguous"
                self.bars.arrive(("full", stage), "armed")  # mbarrier.expect
                assert not self.stage_readers[stage], f"block {ring + j} overwrites a stage a wgmma may read"
                self.stage_holds[stage] = ring + j
                self.bars.arrive(("full", stage), "k")
                self.bars.arrive(("full", stage), "v")
                if j == q_after:
                    if done > 0:
                        yield ("wait", "q_empty", (done - 1) & 1)
                    assert not self.q_users, f"tile {tile}'s q overwrites a q or output a consumer still uses"
                    self.bars.arrive("q_full", "armed")
                    self.q_holds = tile
                    self.bars.arrive("q_full", "q0")
                    self.bars.arrive("q_full", "q1")
            ring += n_blocks
            done += 1

    def _take_turn(self, wg: int, batch: int):
        if self.pingpong:
            if wg == 0:
                if batch > 0:
                    yield ("wait", ("turn", 0), (batch - 1) & 1)
            else:
                yield ("wait", ("turn", 1), batch & 1)

    def _issue(self, wg: int, batch: int) -> None:
        self.issued.append((wg, batch))
        if self.pingpong:  # _gl_give_turn
            self.bars.arrive(("turn", 1 - wg), wg)

    def _read_block(self, wg: int, block: int):
        stage = block % self.stages
        yield ("wait", ("full", stage), (block // self.stages) & 1)
        assert self.stage_holds[stage] == block, f"warpgroup {wg} reads block {block} from a stage holding another"
        assert self.bars.phase[("full", stage)] == block // self.stages + 1, "parity wait is ambiguous"
        self.stage_readers[stage].add(wg)

    def _free(self, wg: int, block: int) -> None:  # after wgmma.wait_group 0 of the P V product
        stage = block % self.stages
        self.stage_readers[stage].discard(wg)
        self.bars.arrive(("empty", stage), wg)

    def consumer(self, wg: int):
        ring = batch = done = 0
        for tile, n_blocks in enumerate(self.tiles):
            yield ("wait", "q_full", done & 1)
            assert self.q_holds == tile, f"warpgroup {wg} reads tile {self.q_holds}'s q for tile {tile}"
            self.q_users.add(wg)
            yield from self._read_block(wg, ring)
            yield from self._take_turn(wg, batch)
            self._issue(wg, batch)
            for j in range(1, n_blocks):
                yield from self._read_block(wg, ring + j)
                yield from self._take_turn(wg, batch + j)
                self._issue(wg, batch + j)
                self._free(wg, ring + j - 1)
            yield from self._take_turn(wg, batch + n_blocks)
            self._issue(wg, batch + n_blocks)
            self._free(wg, ring + n_blocks - 1)
            ring += n_blocks
            batch += n_blocks + 1
            yield ("step", None, None)  # the epilogue: the output is staged in q's buffer and stored from it
            self.q_users.discard(wg)  # the output left q's buffer (tma.store_wait 0)
            self.bars.arrive("q_empty", wg)
            done += 1


def run(kernel: Kernel, seed: int) -> Kernel:
    parts = [kernel.loader(), kernel.consumer(0), kernel.consumer(1)]
    waiting: list = [None] * 3
    finished = [False] * 3
    rng = random.Random(seed)
    for _ in range(200_000):
        ready = [i for i in range(3) if not finished[i] and (
            waiting[i] is None or waiting[i][0] == "step" or kernel.bars.passed(waiting[i][1], waiting[i][2]))]
        if not ready:
            assert all(finished), f"deadlock: loader / consumers wait on {waiting}"
            return kernel
        i = rng.choice(ready)
        try:
            waiting[i] = next(parts[i])
        except StopIteration:
            finished[i], waiting[i] = True, None
    raise AssertionError("no end after 200,000 steps")


def assert_all_released(kernel: Kernel) -> None:
    """At the end every stage was filled and freed once a block it held, q once a tile, nothing half-arrived."""
    blocks = sum(kernel.tiles)
    for s in range(kernel.stages):
        uses = len(range(s, blocks, kernel.stages))
        assert kernel.bars.phase[("full", s)] == uses and kernel.bars.phase[("empty", s)] == uses, f"stage {s}"
    assert kernel.bars.phase["q_full"] == kernel.bars.phase["q_empty"] == len(kernel.tiles)
    assert not any(kernel.bars.pending.values()), f"arrivals left in an unfinished phase: {kernel.bars.pending}"


def causal_tiles(n_m: int) -> list[int]:
    """Key blocks of each query block, heaviest first (REVERSE, BLOCK_M = BLOCK_N)."""
    return [m + 1 for m in reversed(range(n_m))]


TILE_SEQUENCES = {
    "one-tile-one-block": [1],
    "one-tile": [7],
    "not-causal-persistent": [8, 8, 8],
    "causal-block": causal_tiles(1),
    "causal-persistent-stride": causal_tiles(9)[::2],  # a block of a persistent grid takes every other tile
    "causal-all": causal_tiles(6),
    "short-after-long": [5, 1, 1, 4, 2],
}


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("pingpong", [False, True], ids=["no-pingpong", "pingpong"])
@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("name", sorted(TILE_SEQUENCES))
def test_gluon_attention_barriers_under_random_interleavings(name: str, stages: int, pingpong: bool,
                                                            seed: int) -> None:
    tiles = TILE_SEQUENCES[name]
    kernel = run(Kernel(tiles, stages, pingpong), seed)
    assert_all_released(kernel)
    batches = sum(n + 1 for n in tiles)
    assert sorted(kernel.issued) == sorted((wg, b) for wg in (0, 1) for b in range(batches))
    if pingpong:  # the warpgroups take turns: 0, 1, 0, 1, ... each batch k of warpgroup 0 before warpgroup 1's
        assert kernel.issued == [(wg, b) for b in range(batches) for wg in (0, 1)]


MUTATIONS = {  # a change to the loader's waits, as the scheduler sees them: each must be caught
    "empty-parity-off-by-one": lambda step: (step[0], step[1], 1 - step[2]) if step[1][0] == "empty" else step,
    "q-refilled-without-waiting": lambda step: None if step[1] == "q_empty" else step,
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_the_model_catches_a_broken_loader(mutation: str) -> None:
    """The checks have teeth: a loader waiting with the other parity, or refilling q's buffer without waiting for
    the consumers' `q_empty`, is caught (a wrong block read, an overwrite, or a deadlock) under some of 20
    interleavings, while the kernel's own loader passes all of them."""
    caught = 0
    for seed in range(20):
        kernel = Kernel([6, 3, 2], 2, False)
        original = kernel.loader

        def mutated(original=original):
            for step in original():
                changed = MUTATIONS[mutation](step)
                if changed is not None:
                    yield changed
        kernel.loader = mutated
        try:
            run(kernel, seed)
        except AssertionError:
            caught += 1
        assert_all_released(run(Kernel([6, 3, 2], 2, False), seed))
    assert caught > 0, f"the {mutation} loader passed all 20 interleavings"


def test_the_model_catches_a_consumer_that_keeps_its_last_stage() -> None:
    """Without the arrival that frees a tile's last block (added for the persistent tile loop), a one-tile
    grid still ends, but the stage stays held: the end-of-run check must see it."""
    kernel = Kernel([4], 3, False)
    original_free = kernel._free

    def free_but_the_last(wg: int, block: int) -> None:
        if block != 3:
            original_free(wg, block)
    kernel._free = free_but_the_last
    with pytest.raises(AssertionError, match="stage 0"):
        assert_all_released(run(kernel, 0))
