"""autokernel-ci harness: five-stage verification, benchmark, sandboxed workers.

Public API (docs/internal-api.md): verify, bench, Evaluator, decide, Decision. Imported lazily so
that `import autokernel_ci.harness.plugin` (loaded in every pytest session) does not import torch.
"""

from __future__ import annotations

from typing import Any

# Bound eagerly (decide.py needs no torch): resolved lazily, the first import of the submodule
# autokernel_ci.harness.decide set the package attribute `decide` to the module, and the next loop in
# the same process called the module ("TypeError: 'module' object is not callable").
from autokernel_ci.harness.decide import Decision as Decision
from autokernel_ci.harness.decide import decide as decide

_EXPORTS = {
    "verify": "autokernel_ci.harness.evaluator",
    "bench": "autokernel_ci.harness.evaluator",
    "Evaluator": "autokernel_ci.harness.evaluator",
    "BenchFailed": "autokernel_ci.harness.evaluator",
    "HarnessError": "autokernel_ci.harness.evaluator",
}

__all__ = sorted([*_EXPORTS, "decide", "Decision"])


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'autokernel_ci.harness' has no attribute {name!r}")
