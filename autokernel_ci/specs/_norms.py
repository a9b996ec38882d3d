"""Shape sets the two norm specs share: RMSNorm (LLaMA) and LayerNorm (GPT-2) normalise the same hidden
states, so one table keeps their sweeps and benchmarks on the same sizes."""

from __future__ import annotations

from types import MappingProxyType

from autokernel_ci.specs.base import Shape

# read-only: both specs hold this one table
NORM_SHAPE_SETS: MappingProxyType[str, tuple[Shape, ...]] = MappingProxyType({
    "llama7b": ({"M": 8192, "N": 4096},),  # 2 x 4096 tokens of LLaMA-7B's 4096-wide hidden state
    "gpt2": ({"M": 8192, "N": 768},),  # GPT-2 small's 768-wide hidden state
    "odd": ({"M": 257, "N": 3000}, {"M": 1000, "N": 1000}),
    # one element, a prime row, a prime row of 40961 (past the Triton starters' largest MAX_BLOCK, 32768: their
    # looped path), a batch dimension
    "edge": ({"M": 1, "N": 1}, {"M": 3, "N": 7}, {"M": 2, "N": 40961}, {"B": 2, "M": 3, "N": 5}),
    "cpu": ({"M": 16, "N": 256}, {"M": 9, "N": 100}),
})
