"""Evaluator.evaluate(confirm=...): a candidate decide() would keep is re-timed in turn with the best.

The recorded best is stale on purpose (1e12 us: every candidate beats it), so decide() asks for a confirmation; the
re-timing in turn then compares what the two sources really take now. SLOW launches the honest kernel three times
(three times the interpreter's work for the same output), so it loses every pair to HONEST and HONEST wins every
pair against it, whatever the CPU's noise.
"""

from __future__ import annotations

import functools
import json

import pytest
from harness_testlib import FIXTURES, source

from autokernel_ci.harness import decide
from autokernel_ci.harness.confirm import Confirmation, ConfirmRequest, judge
from autokernel_ci.harness.results import BenchResult, Status, Timing

STALE = Timing(1e12, 1e12, 1e12, 10)  # a best recorded far slower than anything runs: decide() keeps every candidate
UNBEATABLE = Timing(1e-3, 1e-3, 1e-3, 10)
HONEST = source(FIXTURES / "rmsnorm_honest.py")
SLOW = HONEST.replace("    if x2.numel():\n", "    for _ in range(3 if x2.numel() else 0):\n")
CRASHES = HONEST.replace("    n = x.shape[-1]\n", "    raise RuntimeError('the best no longer runs')\n")


def test_the_fixtures_differ_where_they_should():
    assert SLOW != HONEST and CRASHES != HONEST


def _request(best_source: str, best: Timing = STALE, pairs: int = 2) -> ConfirmRequest:
    return ConfirmRequest(best_source, best, decide, pairs)


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("candidate", "best_source", "screened", "confirmed", "reason"), [
    pytest.param(HONEST, SLOW, True, True, "confirmed in turn: won 2 of 2 pairs", id="faster-timed-first"),
    pytest.param(SLOW, HONEST, False, False, "not confirmed in turn (pair 1 of 2): slower", id="slower-verified-first"),
])
def test_a_keep_is_retimed_in_turn_with_the_best(evaluator, candidate, best_source, screened, confirmed, reason):
    screen = functools.partial(decide, best=STALE) if screened else None
    verdict, result = evaluator.evaluate(candidate, dtype="float32", baselines=False, screen=screen,
                                         confirm=_request(best_source))
    assert verdict.status is Status.PASS, verdict.reason  # verified either way: a confirmation never skips a stage
    assert result is not None and result.confirmation is not None
    got = Confirmation.from_dict(result.confirmation)
    assert got.confirmed is confirmed and got.reason.startswith(reason), got.reason
    assert len(got.pairs) == 2  # both pairs timed, then judged
    assert got.best is not None and got.best.median_us == pytest.approx(min(b for b, _ in got.pairs), abs=1e-3)
    for best_us, candidate_us in got.pairs:
        assert 0 < best_us < 1e12 and 0 < candidate_us  # re-timed now, not the stale record
        assert (candidate_us < best_us) is confirmed
    # the confirmation travels with the result through the worker pipe and the journal's JSON
    assert BenchResult.from_dict(result.to_dict()).confirmation == result.confirmation


@pytest.mark.timeout(300)
def test_no_confirmation_for_a_candidate_decide_reverts(evaluator):
    verdict, result = evaluator.evaluate(HONEST, dtype="float32", baselines=False, confirm=_request(SLOW, UNBEATABLE))
    assert verdict.status is Status.PASS and result is not None
    assert result.confirmation is None  # decide() reverts it: nothing is re-timed


@pytest.mark.timeout(300)
def test_a_best_that_no_longer_runs_confirms_nothing(evaluator):
    verdict, result = evaluator.evaluate(HONEST, dtype="float32", baselines=False, confirm=_request(CRASHES))
    assert verdict.status is Status.PASS and result is not None  # the candidate is fine; its keep is not
    got = Confirmation.from_dict(result.confirmation)
    assert not got.confirmed and got.pairs == []
    assert got.reason.startswith("not confirmed: re-timing the best failed:") and "no longer runs" in got.reason
    # the worker that ran the crashing best still evaluates the next candidate
    verdict, result = evaluator.evaluate(HONEST, dtype="float32", baselines=False)
    assert verdict.status is Status.PASS and result is not None and result.rows


def _t(median_us: float, spread_us: float = 0.0) -> Timing:
    return Timing(median_us, median_us - spread_us / 2, median_us + spread_us / 2, 100)


@pytest.mark.parametrize(("pairs", "confirmed", "reason"), [
    ([(_t(100), _t(90)), (_t(100), _t(95))], True, "confirmed in turn: won 2 of 2 pairs (1.111x, 1.053x)"),
    ([(_t(100), _t(90)), (_t(100), _t(99.5))], False, "not confirmed in turn (pair 2 of 2): within noise"),
    ([(_t(100), _t(101)), (_t(100), _t(90))], False, "not confirmed in turn (pair 1 of 2): slower"),
    ([(_t(100, 12), _t(90))], False, "not confirmed in turn (pair 1 of 1): within noise"),  # 10 us < 12 us spread
    ([(_t(100, 12), _t(85))], True, "confirmed in turn: won 1 of 1 pairs (1.176x)"),
])
def test_judge_needs_every_pair_won_beyond_noise(pairs, confirmed, reason):
    got = judge(pairs, decide)
    assert got.confirmed is confirmed and got.reason.startswith(reason), got.reason
    assert got.pairs == [(b.median_us, c.median_us) for b, c in pairs]
    assert got.best == min((b for b, _ in pairs), key=lambda b: b.median_us)  # the loop's new reference if reverted
    assert Confirmation.from_dict(json.loads(json.dumps(got.to_dict()))) == got


def test_a_request_needs_a_pair_and_judging_needs_one():
    with pytest.raises(ValueError, match="confirm pairs must be at least 1, got 0"):
        ConfirmRequest(HONEST, STALE, decide, 0)
    with pytest.raises(ValueError, match="no re-timed pairs"):
        judge([], decide)
