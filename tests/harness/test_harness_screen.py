"""Evaluator.evaluate(screen=...): the benchmark first, the five stages only for a candidate the screen keeps.

The screen is decide() against a best time: a best no CPU candidate can beat (1 ns) screens everything out, one
every candidate beats (1e12 us) lets everything through to the stages.
"""

from __future__ import annotations

import functools
import json

import pytest
from harness_testlib import EXPLOITS, FIXTURES, source
from test_harness_exploits import REJECTED

from autokernel_ci.harness import decide
from autokernel_ci.harness.results import STAGES, Status, Timing, Verdict

UNBEATABLE = Timing(1e-3, 1e-3, 1e-3, 10)
BEATEN_BY_ALL = Timing(1e12, 1e12, 1e12, 10)
HONEST = source(FIXTURES / "rmsnorm_honest.py")
WRONG = HONEST.replace("rstd = 1.0 / tl.sqrt(", "rstd = 2.0 / tl.sqrt(")  # every output twice too large
# Rebinds torch.allclose from inside the call: only the benchmark's guard sees it (the import is clean).
TAMPERS_WHEN_CALLED = HONEST.replace("def kernel_fn(x, weight, eps):\n",
                                     "def kernel_fn(x, weight, eps):\n"
                                     "    setattr(torch, 'all' + 'close', lambda *a, **k: True)\n")


def _screen(best: Timing):
    return functools.partial(decide, best=best)


def test_the_fixtures_differ_where_they_should():
    assert WRONG != HONEST and TAMPERS_WHEN_CALLED != HONEST


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("kernel", "best", "status"), [
    pytest.param(HONEST, UNBEATABLE, Status.UNVERIFIED, id="slower-honest-unverified"),
    pytest.param(WRONG, UNBEATABLE, Status.UNVERIFIED, id="slower-wrong-unverified"),
    pytest.param(HONEST, BEATEN_BY_ALL, Status.PASS, id="faster-honest-verified"),
    pytest.param(WRONG, BEATEN_BY_ALL, Status.FAIL, id="faster-wrong-rejected"),
])
def test_only_a_candidate_the_screen_keeps_is_verified(evaluator, kernel, best, status):
    verdict, result = evaluator.evaluate(kernel, dtype="float32", baselines=False, screen=_screen(best))
    assert verdict.status is status, verdict.reason
    assert [s.name for s in verdict.stages] == list(STAGES)
    stage_states = {s.status for s in verdict.stages}
    if status is Status.UNVERIFIED:
        # timed, never checked: a wrong kernel is not caught here, and not kept either (the loop reverts it)
        assert stage_states == {Status.NOT_RUN}
        assert result is not None and len(result.rows) == 1 and result.rows[0].candidate.median_us > 0
        assert verdict.reason.startswith("not verified: slower:"), verdict.reason
        assert Verdict.from_dict(json.loads(json.dumps(verdict.to_dict()))) == verdict
    elif status is Status.PASS:
        assert stage_states == {Status.PASS}
        assert result is not None and result.total().median_us == result.rows[0].candidate.median_us
    else:  # the stages ran and caught it; no timings go back with a rejected verdict
        assert Status.FAIL in stage_states and result is None


@pytest.mark.timeout(300)
@pytest.mark.parametrize("best", [UNBEATABLE, BEATEN_BY_ALL], ids=["slower", "faster"])
def test_a_benchmark_that_caught_tampering_rejects_without_the_screen(evaluator, best):
    verdict, result = evaluator.evaluate(TAMPERS_WHEN_CALLED, dtype="float32", baselines=False,
                                         screen=_screen(best))
    assert verdict.status is Status.FAIL and result is None
    assert verdict.reason.startswith("bench: tampering:") and "allclose" in verdict.reason
    assert verdict.hardening["tampering"].startswith("fail")
    # the worker that ran it was replaced: the next honest candidate passes on a clean checker
    verdict, _ = evaluator.evaluate(HONEST, dtype="float32", baselines=False, screen=_screen(BEATEN_BY_ALL))
    assert verdict.passed, verdict.reason


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", sorted(REJECTED))
def test_every_exploit_that_the_screen_lets_through_is_still_rejected(evaluator, name):
    # timed first and faster than the best: then the five stages must catch it exactly as without the screen
    verdict, result = evaluator.evaluate(source(EXPLOITS / name), dtype="float32", baselines=False,
                                         screen=_screen(BEATEN_BY_ALL), label=name)
    assert verdict.status is Status.FAIL and result is None, verdict.reason
