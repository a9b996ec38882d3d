"""Keep or revert: a candidate is kept only if it beats the best by more than the measured noise."""

from __future__ import annotations

from dataclasses import dataclass

from autokernel_ci.harness.results import Timing

# Smallest noise we ever assume (relative): below 1% run-to-run drift of a GPU clock is not a win.
MIN_NOISE = 0.01


@dataclass(frozen=True)
class Decision:
    keep: bool
    speedup: float  # best.median / candidate.median
    noise: float  # relative to the best's median: max(both p20-p80 spreads, MIN_NOISE)
    reason: str


def decide(candidate: Timing, best: Timing) -> Decision:
    """Keep only if best.median - candidate.median exceeds the noise (the larger p20-p80 spread of the
    two, and at least 1% of the best's median)."""
    if candidate.median_us <= 0 or best.median_us <= 0:
        raise ValueError(f"timings must be positive, got candidate {candidate.median_us} us, best {best.median_us} us")
    noise_us = max(candidate.spread_us, best.spread_us, MIN_NOISE * best.median_us)
    gain_us = best.median_us - candidate.median_us
    speedup = best.median_us / candidate.median_us
    noise = noise_us / best.median_us
    if gain_us > noise_us:
        reason = f"{speedup:.3f}x faster: {gain_us:.2f} us gained > {noise_us:.2f} us noise"
        return Decision(True, round(speedup, 4), round(noise, 4), reason)
    if gain_us > 0:
        reason = f"within noise: {gain_us:.2f} us gained <= {noise_us:.2f} us noise"
    else:
        reason = f"slower: {candidate.median_us:.2f} us vs best {best.median_us:.2f} us"
    return Decision(False, round(speedup, 4), round(noise, 4), reason)
