"""The one interface the loop drives (DESIGN.md §7): `Agent.propose(state) -> Proposal | None`.

The orchestrator builds an `AgentState` from the journal for the op it picked; the agent returns
the next candidate kernel file (its whole source) and a one-line idea, or None when it has
nothing left to try for this op. An agent whose output breaks the rules (an LLM reply without a
kernel, a policy violation) returns a Proposal with `invalid` set: the loop journals it as
`invalid`, charges one experiment and its USD, and never runs it.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any

from autokernel_ci.kernelfile import KernelFile, parse, replace_config, source_hash


@dataclass
class Proposal:
    source: str
    idea: str
    usd: float = 0.0  # spend this proposal cost (LLM tokens), charged even when invalid
    invalid: str = ""  # non-empty: why the proposal must not run (journaled as `invalid`)
    config: dict[str, Any] | None = None  # the CONFIG it sets, when it only re-tunes the best file
    agent: str = ""


@dataclass
class AgentState:
    """What an agent may know when proposing the next candidate for one op."""

    op_id: str
    kernel_type: str
    dtype: str
    shapes: list[dict[str, Any]]
    best: KernelFile  # the current best version of this op (the starter at first)
    n: int  # the experiment number this proposal will get
    seed: int = 0
    best_us: float | None = None
    starter_us: float | None = None
    eager_us: float | None = None
    compile_us: float | None = None
    floor_us: float | None = None  # roofline floor at these shapes (bytes/bandwidth or flops/peak)
    history: list[dict[str, Any]] = field(default_factory=list)  # this op's journal records, oldest first
    measured: set[str] = field(default_factory=set)  # source/config hashes measured anywhere in the run
    gpu: dict[str, Any] = field(default_factory=dict)
    device: str = "cpu"

    @property
    def last(self) -> dict[str, Any] | None:
        return self.history[-1] if self.history else None

    @property
    def roofline_gap(self) -> float | None:
        """best / floor: 1.0 means at the physical limit."""
        if self.best_us and self.floor_us:
            return self.best_us / self.floor_us
        return None


class Agent(abc.ABC):
    name: str = "agent"

    @abc.abstractmethod
    def propose(self, state: AgentState) -> Proposal | None:
        """The next candidate for `state.op_id`, or None when this agent has nothing left to try."""

    def close(self) -> None:  # noqa: B027 - optional hook, most agents hold nothing
        """Release what the agent holds (HTTP clients)."""


def config_hash(kernel: KernelFile) -> str:
    """Hash of the file with its CONFIG written canonically: the same point gets the same hash no matter
    how the CONFIG literal was formatted (the starter's hand-written CONFIG vs `with_config`)."""
    return source_hash(replace_config(kernel.source, kernel.config))


def family_hash(kernel: KernelFile) -> str:
    """Hash of everything but CONFIG: versions that differ only in tunables share a family."""
    return source_hash(replace_config(kernel.source, {}))


def measured_keys(source: str) -> set[str]:
    """The hashes under which a measured source is remembered (raw and canonical-config)."""
    keys = {source_hash(source)}
    try:
        keys.add(config_hash(parse(source)))
    except (ValueError, SyntaxError):
        pass
    return keys
