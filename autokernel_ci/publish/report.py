"""Reports rendered from jinja2 templates (templates/): PR body, comment, job summary, HTML report,
and the plots (PNG, matplotlib's Agg backend: no display on a runner).

Everything a run produced is untrusted text (an LLM wrote the ideas; op names come from the
model): the HTML environment autoescapes, and the Markdown environment escapes every value it
prints unless the template marks it safe, so a kernel idea cannot inject links, HTML or @mentions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from autokernel_ci import __version__
from autokernel_ci.harness.results import STAGES
from autokernel_ci.paths import templates_dir
from autokernel_ci.publish.merge import KernelResult, MergedRun

# Hidden markers: how the bot finds its own PR and comment again (never a duplicate, §8).
PR_MARKER = "<!-- autokernel-ci:pr -->"
COMMENT_MARKER = "<!-- autokernel-ci:comment -->"
REVIEW_MARKER = "<!-- autokernel-ci:review -->"
HEAD_MARKER_RE = re.compile(r"<!-- autokernel-ci:head=([0-9a-f]{40}) -->")

PLOT_NAMES = ("progress.png", "speedup.png", "roofline.png")
COMMENT_COMMANDS = (
    ("/autokernel", "re-run the optimisation on this PR's head and update this comment"),
    ("/autokernel --max-experiments 20", "a short run: at most 20 experiments"),
    ("/autokernel --budget-minutes 30 --top 2", "30 minutes on the two largest targets"),
    ("/autokernel help", "list the options"),
)

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+!|<>~@])")


def md_escape(value: Any) -> str:
    """Escape Markdown/HTML metacharacters (and @ so text cannot mention people)."""
    text = str(value).replace("\r", " ").replace("\n", " ")
    return _MD_SPECIAL.sub(r"\\\1", text).replace("&", "&amp;")


_CODE_SAFE = re.compile(r"[^A-Za-z0-9_.\-/]")


def code_name(value: Any) -> Markup:
    """A name (op id, path) for a fenced code block, where Markdown escapes would print literally:
    anything outside [A-Za-z0-9_.-/] becomes "_" so the value cannot close the block or inject."""
    return Markup(_CODE_SAFE.sub("_", str(value)))


def display_model(ref: str, repo_root: Path | None) -> str:
    """The model reference as the PR shows it: paths relative to the repository (or, for a bundled
    example, to the package checkout); never the runner's absolute path."""
    file_part, sep, rest = ref.partition(":")
    path = Path(file_part)
    if not path.is_absolute():
        return ref
    package_root = Path(__file__).resolve().parents[2]
    for root in (repo_root, package_root, package_root / "autokernel_ci" / "_data"):
        if root is not None and path.is_relative_to(root.resolve()):
            return f"{path.relative_to(root.resolve()).as_posix()}{sep}{rest}"
    return f"{path.name}{sep}{rest}"


def _md_finalize(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, Markup):
        return str(value)
    return md_escape(value)


def fmt_x(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}x"


def fmt_us(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value / 1000:.2f} ms" if value >= 1000 else f"{value:.1f} µs"


def fmt_pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f}%"


def _env(autoescape: bool) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        autoescape=autoescape,
        finalize=None if autoescape else _md_finalize,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(x=fmt_x, us=fmt_us, pct=fmt_pct, md=md_escape, code=code_name)
    return env


def render_markdown(template: str, context: Mapping[str, Any]) -> str:
    return _env(False).get_template(template).render(**context)


def render_html(template: str, context: Mapping[str, Any]) -> str:
    return _env(True).get_template(template).render(**context)


def render_code(template: str, context: Mapping[str, Any]) -> str:
    """Generated Python (enable module, tests): values are passed through `repr`-like filters only."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir())), autoescape=False,
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["py"] = repr
    return env.get_template(template).render(**context)


@dataclass
class Links:
    """Where a reader finds the published files: on the bot branch (GitHub) or on disk (local)."""

    server_url: str | None = None
    repo: str | None = None
    branch: str | None = None

    def file(self, path: str) -> str:
        if self.server_url and self.repo and self.branch:
            # blob URL with ?raw=true: GitHub serves the image itself, private repositories included
            return f"{self.server_url.rstrip('/')}/{self.repo}/blob/{self.branch}/{path}?raw=true"
        return path


def kernel_row(k: KernelResult) -> dict[str, Any]:
    return {
        "op_id": k.op_id, "kernel_type": k.kernel_type, "backend": k.backend, "gpu": k.gpu,
        "share": None if k.share is None else 100.0 * k.share, "eager_us": k.eager_us,
        "compile_us": k.compile_us, "ours_us": k.median_us, "speedup_vs_eager": k.speedup_vs_eager,
        "speedup_vs_compile": k.speedup_vs_compile, "pct_of_ceiling": k.pct_of_ceiling,
        "stages": [(s, k.stages.get(s, "not_run")) for s in STAGES],
        "stages_ok": all(k.stages.get(s) == "pass" for s in STAGES),
        "experiments": k.experiments, "kept": k.kept, "idea": k.idea, "n": k.n, "shard": k.shard,
        "shapes": ", ".join("x".join(f"{a}{b}" for a, b in s.items()) for s in k.shapes) or "–",
        "dtype": k.dtype or "–", "source_hash": k.source_hash,
    }


def end_to_end_summary(e2e: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The end-to-end result (integrate.end_to_end) in the few fields the reports show."""
    if not e2e:
        return None

    def first(*keys: str) -> Any:
        return next((e2e[k] for k in keys if e2e.get(k) is not None), None)

    return {
        "speedup": first("speedup_vs_eager", "speedup"),
        "speedup_vs_compile": first("speedup_vs_compile"),
        "eager_ms": first("eager_ms", "baseline_ms"),
        "ours_ms": first("ours_ms", "patched_ms", "optimized_ms"),
        "passed": first("passed", "ok", "outputs_match"),
        "max_abs_err": first("max_abs_err"),
        "note": first("note", "reason") or "",
    }


def build_context(merged: MergedRun, published: list[KernelResult], *, repo: str | None, branch: str,
                  kernels_dir: str, links: Links, min_speedup: float,
                  repo_root: Path | None = None) -> dict[str, Any]:
    e2e = end_to_end_summary(merged.end_to_end)
    speedups = [k.speedup_vs_eager for k in published if k.speedup_vs_eager]
    plan = merged.plan or {}
    return {
        "pr_marker": Markup(PR_MARKER), "comment_marker": Markup(COMMENT_MARKER), "head_marker": Markup(""),
        "version": __version__, "repo": repo or "", "branch": branch, "kernels_dir": Markup(kernels_dir),
        "gpus": merged.gpus, "gpu": ", ".join(merged.gpus) or "unknown GPU",
        "kernels": [kernel_row(k) for k in published],
        "not_published": [kernel_row(k) for k in merged.kernels if k not in published],
        "others": merged.others, "shards": merged.shards, "experiments": merged.experiments,
        "usd": sum(s.usd for s in merged.shards), "e2e": e2e,
        "best_kernel_speedup": max(speedups) if speedups else None,
        "model": display_model(plan.get("model") or "", repo_root), "dtype": plan.get("dtype") or "",
        "device": plan.get("device") or "",
        "images": {name: Markup(links.file(f"{kernels_dir}/report/{name}")) for name in PLOT_NAMES},
        "report_link": Markup(links.file(f"{kernels_dir}/report.html")),
        "min_speedup": min_speedup, "commands": COMMENT_COMMANDS,
    }


# -- plots ------------------------------------------------------------------------------------------
def write_plots(merged: MergedRun, published: list[KernelResult], out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []

    fig, ax = plt.subplots(figsize=(8, 4.5))
    by_op: dict[str, list[dict[str, Any]]] = {}
    for rec in merged.records:
        by_op.setdefault(rec["op_id"], []).append(rec)
    for op_id, recs in sorted(by_op.items()):
        recs = sorted(recs, key=lambda r: (r.get("time") or "", r.get("n", 0)))
        best, xs, ys, kept_x, kept_y, rev_x, rev_y = None, [], [], [], [], [], []
        for i, r in enumerate(recs, 1):
            s = r.get("speedup_vs_eager")
            if r.get("status") == "kept" and isinstance(s, int | float):
                best = s if best is None else max(best, s)
                kept_x.append(i)
                kept_y.append(s)
            elif isinstance(s, int | float):
                rev_x.append(i)
                rev_y.append(s)
            if best is not None:
                xs.append(i)
                ys.append(best)
        line = ax.step(xs, ys, where="post", label=op_id)[0] if xs else None
        color = line.get_color() if line else None
        ax.scatter(kept_x, kept_y, color=color, marker="o", s=18)
        ax.scatter(rev_x, rev_y, color=color, marker="x", s=14, alpha=0.5)
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("experiment (per kernel)")
    ax.set_ylabel("speedup vs eager (best so far)")
    ax.set_title("Progress over experiments (o kept, x reverted/rejected)")
    if any(not label.startswith("_") for label in ax.get_legend_handles_labels()[1]):
        ax.legend(fontsize=8)
    paths.append(_save(fig, out_dir / "progress.png", plt))

    fig, ax = plt.subplots(figsize=(8, 4.5))
    names = [k.op_id for k in published]
    xs = range(len(names))
    ax.bar([x - 0.2 for x in xs], [k.speedup_vs_eager or 0 for k in published], width=0.4, label="vs eager")
    ax.bar([x + 0.2 for x in xs], [k.speedup_vs_compile or 0 for k in published], width=0.4,
           label="vs torch.compile")
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xticks(list(xs), names, rotation=20, fontsize=8)
    ax.set_ylabel("speedup")
    ax.set_title("Speedup per kernel")
    if published:
        ax.legend(fontsize=8)
    paths.append(_save(fig, out_dir / "speedup.png", plt))

    fig, ax = plt.subplots(figsize=(8, 4.5))
    ours = [k.pct_of_ceiling or 0.0 for k in published]
    eager = [(k.pct_of_ceiling or 0.0) * k.median_us / k.eager_us if k.eager_us else 0.0 for k in published]
    comp = [(k.pct_of_ceiling or 0.0) * k.median_us / k.compile_us if k.compile_us else 0.0 for k in published]
    ax.bar([x - 0.27 for x in xs], eager, width=0.27, label="eager")
    ax.bar(list(xs), comp, width=0.27, label="torch.compile")
    ax.bar([x + 0.27 for x in xs], ours, width=0.27, label="ours")
    ax.axhline(100.0, color="red", lw=0.8, ls="--", label="roofline (GPU ceiling)")
    ax.set_xticks(list(xs), names, rotation=20, fontsize=8)
    ax.set_ylabel("% of roofline")
    ax.set_title("Share of the GPU's roofline reached")
    if published:
        ax.legend(fontsize=8)
    paths.append(_save(fig, out_dir / "roofline.png", plt))
    return paths


def _save(fig: Any, path: Path, plt: Any) -> Path:
    fig.tight_layout()
    # fixed metadata: the same results give byte-identical PNGs, so an unchanged run makes no diff
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)
    return path
