"""Progress output: local lines, GitHub Actions groups and job summary, progress.png."""

from __future__ import annotations

import io

import pytest

from autokernel_ci.loop.progress import Reporter, experiment_line, plot_progress, summary_markdown
from autokernel_ci.render import REASON_WIDTH

RECORD = {"n": 7, "op_id": "rmsnorm-0", "status": "kept", "idea": "BLOCK=2048 (descent)", "median_us": 35.1,
          "speedup_vs_starter": 1.25, "duration_s": 6.2, "reason": "", "stages": {"smoke": "pass"}}
SUMMARY = {"experiments": 7, "kept": 2, "agent": "search", "elapsed_s": 120.0, "usd": 0.0, "stopped": "max",
           "end_to_end_estimate": 1.05,
           "ops": {"rmsnorm-0": {"op_id": "rmsnorm-0", "kernel_type": "rmsnorm", "starter_us": 43.9, "best_us": 35.1,
                                 "speedup_vs_starter": 1.25, "speedup_vs_eager": 11.0, "speedup_vs_compile": None,
                                 "pct_of_ceiling": 91.5, "experiments": 7, "kept": 2}}}


def test_local_line_has_n_op_idea_status_time_speedup():
    out = io.StringIO()
    Reporter(None, stream=out, env={}).experiment(RECORD)
    line = out.getvalue()
    assert line.count("\n") == 1
    for part in ("#0007", "rmsnorm-0", "kept", "BLOCK=2048", "35.10us", "1.25x", "6.2s"):
        assert part in line


# the H200 example's reason (160 characters), one that fits, and a compiler error over two lines
LONG_REASON = ("edge_cases: allclose: relative L2 error 0.000277 > 0.0001: less precise than the reference allows "
               "at shape (1, 32000) bf16; fix: accumulate the row's sum in fp32")


@pytest.mark.parametrize(("reason", "shown"), [
    (LONG_REASON, LONG_REASON[:REASON_WIDTH - 1] + "…"),
    ("smoke: the kernel raised ZeroDivisionError", "smoke: the kernel raised ZeroDivisionError"),
    ("compile: nvrtc error\nkernel.cu(3): error: expected ;", "compile: nvrtc error kernel.cu(3): error: expected ;"),
])
def test_local_line_shows_a_failure_reason_on_one_line_and_marks_a_cut(reason, shown):
    line = experiment_line({**RECORD, "status": "rejected", "reason": reason, "median_us": None,
                            "speedup_vs_starter": None})
    assert "\n" not in line
    assert line.endswith("  " + shown)
    assert len(shown) <= REASON_WIDTH


NOT_CONFIRMED = {"confirmed": False, "pairs": [[388.1, 389.0], [387.9, 388.4]],
                 "reason": "not confirmed in turn (pair 1 of 2): slower: 389.00 us vs best 388.10 us"}


@pytest.mark.parametrize(("confirm", "tail"), [
    (NOT_CONFIRMED, "  " + NOT_CONFIRMED["reason"]),
    ({**NOT_CONFIRMED, "confirmed": True, "reason": "confirmed in turn: won 2 of 2 pairs"}, ""),
    (None, ""),
])
def test_a_reverted_line_says_why_only_when_its_keep_was_not_confirmed(confirm, tail):
    record = {**RECORD, "status": "reverted", "speedup_vs_starter": 1.02, **({"confirm": confirm} if confirm else {})}
    line = experiment_line(record)
    assert line.endswith("6.2s" + tail), line
    out = io.StringIO()
    Reporter(None, stream=out, env={"GITHUB_ACTIONS": "true"}).experiment(record)
    assert (f"confirm: {confirm}" in out.getvalue().splitlines()) == bool(confirm)


def test_actions_group_keeps_the_whole_reason():
    out = io.StringIO()
    Reporter(None, stream=out, env={"GITHUB_ACTIONS": "true"}).experiment({**RECORD, "status": "rejected",
                                                                           "reason": LONG_REASON})
    assert f"reason: {LONG_REASON}" in out.getvalue().splitlines()


def test_github_actions_groups_and_job_summary(tmp_path):
    out = io.StringIO()
    step_summary = tmp_path / "summary.md"
    step_summary.write_text("earlier step\n")
    reporter = Reporter(tmp_path, stream=out, env={"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(step_summary)})
    reporter.experiment(RECORD)
    reporter.finish(SUMMARY)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("::group::#0007") and "::endgroup::" in lines
    text = step_summary.read_text()
    assert text.startswith("earlier step\n")  # appended, not overwritten
    assert "| rmsnorm-0 | rmsnorm | 43.90 | 35.10 | 1.25x | 11.00x | – | 91.5 | 7 | 2 |" in text
    assert text == "earlier step\n" + summary_markdown(SUMMARY) + "\n"


def test_progress_png(tmp_path):
    records = [{"n": 0, "op_id": "a", "status": "kept", "speedup_vs_starter": 1.0},
               {"n": 1, "op_id": "a", "status": "reverted", "speedup_vs_starter": 0.8},
               {"n": 2, "op_id": "a", "status": "kept", "speedup_vs_starter": 1.3},
               {"n": 3, "op_id": "b", "status": "rejected"}]
    plot_progress(records, tmp_path / "progress.png")
    assert (tmp_path / "progress.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(("ops", "expected"), [
    # the H200 run: RMSNorm 11.86x eager at 14.2% of the model, but 1.00x its starter
    ([{"share": 0.142, "speedup_vs_eager": 11.86, "speedup_vs_starter": 1.0}], 1.0 / (1 - 0.142 * (1 - 1 / 11.86))),
    # slower than eager: publish leaves it out, so it changes nothing
    ([{"share": 0.4, "speedup_vs_eager": 0.9, "speedup_vs_starter": 1.2}], 1.0),
    ([{"share": 0.2, "speedup_vs_eager": 2.0}, {"share": 0.1, "speedup_vs_eager": None}], 1.0 / 0.9),
])
def test_end_to_end_estimate_is_amdahl_over_speedups_vs_eager(ops, expected):
    from autokernel_ci.loop.summary import end_to_end_estimate

    assert end_to_end_estimate(ops) == pytest.approx(expected, abs=1e-4)


def test_quiet_drops_experiment_lines_but_not_the_summary():
    out = io.StringIO()
    reporter = Reporter(None, stream=out, env={}, quiet=True)
    reporter.experiment(RECORD)
    assert out.getvalue() == ""
    reporter.finish(SUMMARY)
    assert "| op | type |" in out.getvalue()
