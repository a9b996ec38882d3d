"""autokernel-ci harness: five-stage verification, benchmark, sandboxed workers.

Public API (docs/internal-api.md): verify, bench, Evaluator, decide, Decision. Imported lazily so
that `import autokernel_ci.harness.plugin` (loaded in every pytest session) does not import torch.
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "verify": "autokernel_ci.harness.evaluator",
    "bench": "autokernel_ci.harness.evaluator",
    "Evaluator": "autokernel_ci.harness.evaluator",
    "BenchFailed": "autokernel_ci.harness.evaluator",
    "HarnessError": "autokernel_ci.harness.evaluator",
    "decide": "autokernel_ci.harness.decide",
    "Decision": "autokernel_ci.harness.decide",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'autokernel_ci.harness' has no attribute {name!r}")
