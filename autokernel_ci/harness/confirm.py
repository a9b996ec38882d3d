"""Confirm a keep: the candidate and the best re-timed in turn before the loop keeps anything.

decide() compares a candidate's timing with the best's, measured earlier in the run. Its noise is the spread inside
one timing, which misses the drift between timings taken seconds apart: on an H100 the search agent kept a softmax
CONFIG whose launches were those of the starter (VARIANT "multirow" where "auto" already picks it) as 2.3% faster,
9.10 us gained against 5.42 us of measured noise (fp16, GPT-2 shapes, round `search24d`). Re-timing both, best first
in each pair (a GPU that runs the first point of a pair faster favours the best, not the candidate), and keeping only
a candidate that wins every pair beyond noise turns that drift into a reverted experiment.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from autokernel_ci.harness.decide import Decision
from autokernel_ci.harness.results import Timing

# best, candidate, best, candidate: four benchmarks for each of the 0-2 keeps a type had in a 45 s run (search24c/d);
# each a load and a timing as in a screened experiment (0.66-2.26 s for the H100's matmul)
DEFAULT_PAIRS = 2


@dataclass(frozen=True)
class ConfirmRequest:
    """What Evaluator.evaluate needs to confirm a keep: the best's source and timing, the loop's decide()."""

    best_source: str
    best: Timing
    decide: Callable[[Timing, Timing], Decision]
    pairs: int = DEFAULT_PAIRS

    def __post_init__(self) -> None:
        if self.pairs < 1:
            raise ValueError(f"confirm pairs must be at least 1, got {self.pairs}: give 1 or more (or no request)")


@dataclass(frozen=True)
class Confirmation:
    confirmed: bool
    reason: str
    pairs: list[tuple[float, float]] = field(default_factory=list)  # (best_us, candidate_us), in the order timed
    # The best's fastest re-timing: the loop's new reference for the best when the keep is not confirmed. Its first
    # timing was the slow one: compared with it, every later point that runs alike would be screened in, verified
    # and re-timed again (search24d's softmax: decide() keeps 10 of the 18 points after the false keep, 387.8-391.5
    # us, against the starter's one 397.65 us timing).
    best: Timing | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"confirmed": self.confirmed, "reason": self.reason, "pairs": [list(p) for p in self.pairs],
                "best": asdict(self.best) if self.best is not None else None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Confirmation:
        best = Timing(**d["best"]) if d.get("best") else None
        return cls(bool(d["confirmed"]), str(d["reason"]), [(float(b), float(c)) for b, c in d.get("pairs", [])],
                   best)


def judge(pairs: Sequence[tuple[Timing, Timing]], decide: Callable[[Timing, Timing], Decision]) -> Confirmation:
    """Confirmed only if decide() keeps the candidate against the re-timed best in every (best, candidate) pair."""
    if not pairs:
        raise ValueError("no re-timed pairs to judge: time the best and the candidate in turn at least once")
    timed = [(round(b.median_us, 3), round(c.median_us, 3)) for b, c in pairs]
    fastest_best = min((b for b, _ in pairs), key=lambda b: b.median_us)
    for i, (best, candidate) in enumerate(pairs, 1):
        decision = decide(candidate, best)
        if not decision.keep:
            return Confirmation(False, f"not confirmed in turn (pair {i} of {len(pairs)}): {decision.reason}", timed,
                                fastest_best)
    gains = ", ".join(f"{b / c:.3f}x" for b, c in timed)
    return Confirmation(True, f"confirmed in turn: won {len(pairs)} of {len(pairs)} pairs ({gains})", timed,
                        fastest_best)


def unfinished(reason: str, pairs: Sequence[tuple[float, float]] = ()) -> Confirmation:
    """A re-timing that could not finish (the best or the candidate crashed, hung or was rejected): not confirmed."""
    return Confirmation(False, f"not confirmed: {reason}", list(pairs))
