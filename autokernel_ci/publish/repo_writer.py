"""Write the publication (docs/artifacts.md §3) into a directory: kernels, enable module, tests,
results.json, report.html and plots.

The output is a pure function of the run directories (no clock, no absolute paths), so publishing
the same results twice gives byte-identical files and therefore no diff and no new commit.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from autokernel_ci import __version__
from autokernel_ci.publish.merge import KernelResult, MergedRun
from autokernel_ci.publish.report import build_context, render_code, render_html, write_plots

RESULTS_VERSION = 1


@dataclass
class Publication:
    root: Path  # directory holding `kernels_dir` (the staging copy of the repository's files)
    kernels_dir: str
    files: list[str]  # paths relative to root, sorted
    context: dict[str, Any]  # the report context (PR body, comment and summary render from it)

    @property
    def report_path(self) -> Path:
        return self.root / self.kernels_dir / "report.html"


def results_document(merged: MergedRun, published: list[KernelResult]) -> dict[str, Any]:
    shards = []
    for s in merged.shards:
        d = asdict(s)
        d["run_dir"] = Path(s.run_dir).name  # the runner's absolute paths mean nothing in the repository
        shards.append(d)
    kernels = []
    for k in published:
        d = k.to_dict()
        d["run_dir"] = Path(k.run_dir).name
        d["file"] = f"kernels/{k.op_id}.py"
        kernels.append(d)
    return {
        "version": RESULTS_VERSION,
        "generated_by": f"autokernel-ci {__version__}",
        "gpus": merged.gpus,
        "experiments": merged.experiments,
        "kernels": kernels,
        "not_published": [k.op_id for k in merged.kernels if k not in published],
        "others": merged.others,
        "shards": shards,
        "end_to_end": merged.end_to_end,
        "plan": merged.plan,
    }


def write_publication(root: Path, merged: MergedRun, published: list[KernelResult], *, kernels_dir: str,
                      context: dict[str, Any]) -> Publication:
    """(Re)create `root/kernels_dir` holding exactly this publication."""
    base = root / kernels_dir
    if base.exists():
        shutil.rmtree(base)
    (base / "kernels").mkdir(parents=True)
    (base / "tests").mkdir()
    for k in published:
        (base / "kernels" / f"{k.op_id}.py").write_text(k.source if k.source.endswith("\n") else k.source + "\n")
    entries = [
        {"op_id": k.op_id, "kernel_type": k.kernel_type, "backend": k.backend, "modules": k.modules,
         "shapes": k.shapes, "dtype": k.dtype}
        for k in published
    ]
    code_ctx = {"kernels": entries, "version": __version__, "kernels_dir": kernels_dir}
    (base / "__init__.py").write_text(render_code("enable.py.j2", code_ctx))
    (base / "tests" / "__init__.py").write_text("")
    (base / "tests" / "test_verify.py").write_text(render_code("test_verify.py.j2", code_ctx))
    (base / "tests" / "test_bench.py").write_text(render_code("test_bench.py.j2", code_ctx))
    (base / "results.json").write_text(json.dumps(results_document(merged, published), indent=2,
                                                  sort_keys=True, default=str) + "\n")
    write_plots(merged, published, base / "report")
    (base / "report.html").write_text(render_html("report.html.j2", context))
    files = sorted(p.relative_to(root).as_posix() for p in base.rglob("*") if p.is_file())
    return Publication(root=root, kernels_dir=kernels_dir, files=files, context=context)


def stage(root: Path, merged: MergedRun, published: list[KernelResult], *, repo: str | None, branch: str,
          kernels_dir: str, links: Any, min_speedup: float, repo_root: Path | None = None) -> Publication:
    context = build_context(merged, published, repo=repo, branch=branch, kernels_dir=kernels_dir, links=links,
                            min_speedup=min_speedup, repo_root=repo_root)
    return write_publication(root, merged, published, kernels_dir=kernels_dir, context=context)
