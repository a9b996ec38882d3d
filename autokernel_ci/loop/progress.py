"""Progress output of the loop: one line per experiment locally, `::group::` blocks and a job summary
under GitHub Actions, and progress.png (speedup over experiments per kernel, kept vs reverted)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from autokernel_ci.loop.journal import atomic_write
from autokernel_ci.render import clip

PNG_EVERY_S = 15.0  # redraw progress.png at most this often (~0.3 s per draw with matplotlib)
IDEA_WIDTH = 48


def _fmt_us(value: float | None) -> str:
    return f"{value:9.2f}us" if value is not None else "        --"


def experiment_line(record: dict[str, Any]) -> str:
    """'#0012 rmsnorm-0      kept      BLOCK=2048 ...  35.10us  1.15x  6.2s'"""
    speed = record.get("speedup_vs_starter")
    idea = (record.get("idea") or "")[:IDEA_WIDTH]
    # clipped as verify's table clips it (the journal and the Actions group keep all of it): the H200 example's
    # edge_cases reason ran to 160 characters, and a plain [:80] had cut it mid-sentence with no sign of the cut
    tail = clip(record.get("reason", "")) if record["status"] not in ("kept", "reverted") else ""
    confirm = record.get("confirm") or {}
    if record["status"] == "reverted" and confirm and not confirm.get("confirmed"):
        tail = clip(confirm.get("reason", ""))  # faster on its first timing, so the line alone would not say why
    return (f"#{record['n']:04d} {record['op_id']:<18} {record['status']:<13} {idea:<{IDEA_WIDTH}} "
            f"{_fmt_us(record.get('median_us'))} {f'{speed:.2f}x' if speed else '   --':>7} "
            f"{record.get('duration_s', 0.0):6.1f}s" + (f"  {tail}" if tail else ""))


def summary_markdown(summary: dict[str, Any]) -> str:
    lines = [
        f"### autokernel-ci optimize: {summary['experiments']} experiments, {summary['kept']} kept",
        "",
        f"Agent `{summary.get('agent')}`, {summary['elapsed_s'] / 60:.1f} min, ${summary['usd']:.4f}; "
        f"stopped: {summary.get('stopped') or 'running'}.",
        "",
        "| op | type | starter us | best us | vs starter | vs eager | vs compile | % of ceiling | exps | kept |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def cell(v: Any, fmt: str, unit: str = "") -> str:
        """v formatted with its unit; a missing value is a bare dash (no "–x" when torch.compile was not timed)."""
        return format(v, fmt) + unit if isinstance(v, int | float) else "–"

    for o in summary["ops"].values():
        lines.append(f"| {o['op_id']} | {o['kernel_type']} | {cell(o['starter_us'], '.2f')} | "
                     f"{cell(o['best_us'], '.2f')} | {cell(o['speedup_vs_starter'], '.2f', 'x')} | "
                     f"{cell(o['speedup_vs_eager'], '.2f', 'x')} | {cell(o['speedup_vs_compile'], '.2f', 'x')} | "
                     f"{cell(o['pct_of_ceiling'], '.1f')} | {o['experiments']} | {o['kept']} |")
    if summary.get("end_to_end_estimate"):
        lines += ["", f"Estimated end-to-end speedup (Amdahl over the plan's shares): "
                  f"{summary['end_to_end_estimate']:.3f}x"]
    return "\n".join(lines) + "\n"


def plot_progress(records: list[dict[str, Any]], path: Path) -> None:
    """progress.png: per op, speedup over its starter for each verified experiment; kept filled, reverted hollow."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5), dpi=110)
    ops = sorted({r["op_id"] for r in records})
    for i, op_id in enumerate(ops):
        color = f"C{i % 10}"
        mine = [r for r in records if r["op_id"] == op_id and r.get("speedup_vs_starter")]
        kept = [r for r in mine if r["status"] == "kept"]
        rev = [r for r in mine if r["status"] != "kept"]
        if kept:
            ax.step([r["n"] for r in kept] + [max(r["n"] for r in mine)],
                    [r["speedup_vs_starter"] for r in kept] + [kept[-1]["speedup_vs_starter"]],
                    where="post", color=color, label=op_id)
            ax.scatter([r["n"] for r in kept], [r["speedup_vs_starter"] for r in kept], color=color, zorder=3)
        if rev:
            ax.scatter([r["n"] for r in rev], [r["speedup_vs_starter"] for r in rev], facecolors="none",
                       edgecolors=color, zorder=2)
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("experiment")
    ax.set_ylabel("speedup vs starter")
    ax.set_title("autokernel-ci: kept (filled) vs reverted (hollow)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}.png")
    fig.savefig(tmp)
    plt.close(fig)
    os.replace(tmp, path)


class Reporter:
    def __init__(self, run_dir: Path, *, stream: TextIO | None = None, env: dict[str, str] | None = None,
                 quiet: bool = False):
        self.run_dir = run_dir
        self.stream = stream or sys.stdout
        self.env = dict(os.environ if env is None else env)
        self.actions = self.env.get("GITHUB_ACTIONS") == "true"
        self.quiet = quiet
        self._last_png = 0.0

    def _print(self, text: str) -> None:
        if not self.quiet:
            print(text, file=self.stream, flush=True)

    def start(self, text: str) -> None:
        self._print(text)

    def experiment(self, record: dict[str, Any]) -> None:
        line = experiment_line(record)
        if not self.actions:
            self._print(line)
            return
        self._print(f"::group::{line}")
        for key in ("agent", "idea", "reason", "decision", "confirm", "stages", "median_us", "p20_us", "p80_us",
                    "best_us_before", "speedup_vs_eager", "speedup_vs_compile", "pct_of_ceiling", "source_hash",
                    "slot"):
            if record.get(key) not in (None, "", {}):
                self._print(f"{key}: {record[key]}")
        self._print("::endgroup::")

    def note(self, text: str) -> None:
        self._print(("::notice::" if self.actions else "") + text)

    def plot(self, records: list[dict[str, Any]], *, force: bool = False) -> None:
        if not force and time.monotonic() - self._last_png < PNG_EVERY_S:
            return
        self._last_png = time.monotonic()
        plot_progress(records, self.run_dir / "progress.png")

    def finish(self, summary: dict[str, Any]) -> None:
        markdown = summary_markdown(summary)
        # printed even when quiet: --quiet drops the per-experiment lines, not the result
        print(markdown, file=self.stream, flush=True)
        target = self.env.get("GITHUB_STEP_SUMMARY")
        if self.actions and target:
            with open(target, "a") as fh:
                fh.write(markdown + "\n")

    def write_summary(self, summary: dict[str, Any]) -> None:
        import json

        atomic_write(self.run_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
