"""The one renderer for verification and benchmark results (plain-text tables for terminals, logs
and PR comments in code blocks). Everything that prints a Verdict or BenchResult comes through here."""

from __future__ import annotations

from collections.abc import Sequence

from autokernel_ci.harness.results import BenchResult, Status, Timing, Verdict

_MARK = {Status.PASS: "PASS", Status.FAIL: "FAIL", Status.NOT_RUN: "-"}


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


# a reason cut past this many characters in a table row or a progress line; the whole reason is printed below the
# verdict's tables and kept in the journal
REASON_WIDTH = 110


def clip(text: str, width: int = REASON_WIDTH) -> str:
    """`text` on one line (a compiler error or traceback has several), cut at `width` with a visible "…"."""
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


def render_verdict(v: Verdict, *, hardening: bool = True) -> str:
    # a file that does not parse has no type or backend: "?" rather than a bare "[/ ...]"
    head = (f"{v.kernel}  [{v.kernel_type or '?'}/{v.backend or '?'} {v.source_hash} on {v.device}]  "
            f"{v.status.value.upper()}  ({v.duration_s:.1f} s)")
    rows = [(s.name, _MARK.get(s.status, s.status.value.upper()), s.cases, f"{s.duration_s:.2f}",
             clip(s.reason)) for s in v.stages]
    parts = [head, table(("stage", "result", "cases", "s", "reason"), rows)]
    failure = next((f for s in v.stages for f in s.failures), None)
    if failure is not None:
        detail = [f"check={failure.check}"]
        for name in ("shape", "dtype", "max_abs_err", "max_rel_err", "rel_l2", "first_bad_index"):
            value = getattr(failure, name)
            if value is not None:
                detail.append(f"{name}={value:.3g}" if isinstance(value, float) else f"{name}={value}")
        parts.append("first failure: " + " ".join(detail))
    reason = v.reason.strip()
    if reason and reason != clip(reason):
        # the tables cut a reason to one line of REASON_WIDTH; an input_mutated reason runs to 150 characters and
        # its fix ("use a separate output") came after the cut: the whole of it once, under the tables' summary
        parts.append(reason)
    if hardening and v.hardening:
        parts.append(table(("hardening check", "outcome"),
                           [(k, clip(val, 90)) for k, val in v.hardening.items()]))
    return "\n\n".join(parts)


def _t(t: Timing | None) -> str:
    return "" if t is None else f"{t.median_us:.1f} [{t.p20_us:.1f}-{t.p80_us:.1f}]"


def _x(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}x"


def render_bench(b: BenchResult) -> str:
    head = f"{b.kernel}  [{b.kernel_type}/{b.backend} {b.source_hash} on {b.gpu}]"
    rows = []
    for r in b.rows:
        shape = "x".join(f"{k}{v}" for k, v in r.shape.items())
        rows.append((shape, r.dtype, _t(r.candidate), _t(r.eager), _t(r.compiled), f"{r.value:.1f} {r.metric}",
                     "" if r.pct_of_ceiling is None else f"{r.pct_of_ceiling:.1f}%", _x(r.speedup_vs_eager),
                     _x(r.speedup_vs_compile)))
    parts = [head, table(("shape", "dtype", "kernel us (p20-p80)", "eager us", "compile us", "throughput",
                          "% ceiling", "vs eager", "vs compile"), rows)]
    if b.ceiling_source:
        parts.append(f"ceiling: {b.ceiling_source}")
    failed = {k: v for k, v in b.checks.items() if v.startswith("fail")}
    for check, state in failed.items():
        parts.append(f"REJECTED {check}: {state.removeprefix('fail: ')}")
    if b.note:
        parts.append(f"note: {b.note}")
    return "\n".join(parts)


def render(result: Verdict | BenchResult) -> str:
    if isinstance(result, Verdict):
        return render_verdict(result)
    if isinstance(result, BenchResult):
        return render_bench(result)
    raise TypeError(f"render() takes a Verdict or BenchResult, got {type(result).__name__}")
