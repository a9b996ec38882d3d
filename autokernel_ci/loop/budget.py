"""The loop's bounds (wall minutes, experiments, USD) and the decision to start one more experiment.

Budget use survives `--resume`: experiments and USD are re-counted from the journal, elapsed time
is the cumulative `elapsed_s` of the last journal record (time spent in an experiment that was
killed before it was journaled is lost, never counted twice).
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

# How many of the most recent experiment durations predict the next one. 8 is enough to follow a
# change of kernel (compile-heavy kernels take longer) and short enough to forget it again.
DURATION_WINDOW = 8
# Safety factor on the predicted duration: the p80-ish of experiment times is ~1.3x their median on
# the H200 runs of DESIGN.md §9 (verify dominates and varies with the shape count).
DURATION_SAFETY = 1.3


@dataclass(frozen=True)
class Budget:
    minutes: float | None = 60.0
    experiments: int | None = None
    usd: float | None = None

    def __post_init__(self) -> None:
        for name in ("minutes", "experiments", "usd"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"budget {name}={value} is negative: give a positive bound or leave it unset")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class BudgetUse:
    elapsed_s: float = 0.0  # budget time used before this session (from the journal)
    experiments: int = 0
    usd: float = 0.0
    durations: list[float] = field(default_factory=list)  # experiment durations, oldest first

    def record(self, duration_s: float, usd: float) -> None:
        self.experiments += 1
        self.usd += usd
        self.durations.append(duration_s)

    def predict_next_s(self) -> float:
        """Expected duration of the next experiment (0 before any history: the first one always starts).

        Experiments only. A baseline also times eager and torch.compile and compiles cold: on an H100 the matmul's
        took ~30 s against 0.7-2.3 s for a screened experiment, and predicting from it left a 0.75 min budget
        no experiment at all."""
        recent = self.durations[-DURATION_WINDOW:]
        return statistics.median(recent) * DURATION_SAFETY if recent else 0.0


def stop_reason(budget: Budget, use: BudgetUse, elapsed_s: float, *, in_flight: int = 0) -> str | None:
    """Why no further experiment may start now, or None.

    `elapsed_s` is the budget time used so far (previous sessions + this one); `in_flight` counts
    experiments already started and not yet journaled (parallel workers), which count as spent.
    """
    if budget.experiments is not None and use.experiments + in_flight >= budget.experiments:
        return f"max experiments reached ({budget.experiments})"
    if budget.usd is not None and use.usd >= budget.usd:
        return f"max USD reached (${use.usd:.4f} of ${budget.usd:.2f})"
    if budget.minutes is not None:
        limit = budget.minutes * 60.0
        if elapsed_s >= limit:
            return f"time budget reached ({budget.minutes:g} min)"
        predicted = use.predict_next_s()
        if elapsed_s + predicted > limit:
            return (f"next experiment (~{predicted:.1f} s predicted) would overrun the time budget "
                    f"({limit - elapsed_s:.1f} s left of {budget.minutes:g} min)")
    return None
