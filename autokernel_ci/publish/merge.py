"""Read one or more run directories (docs/artifacts.md §2) and pick, per op, the best verified kernel.

Shards of one plan each leave a run directory; the merge step reads them all. The journal is the
source of truth: it is appended and fsync'd after every experiment, so a shard that died half way
still contributes every experiment it finished (summary.json may be stale or missing, and the last
journal line may be torn). A version counts only if the journal says it was kept with all five
stages passing AND its file is on disk with the recorded source hash.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from autokernel_ci.harness.results import STAGES
from autokernel_ci.kernelfile import KernelFileError, parse, source_hash
from autokernel_ci.loop.journal import is_experiment

RUN_DIR_VERSION = 1
# op ids become file names in the repository: "<kernel_type>-<n>" and nothing that could climb out
OP_ID_RE = re.compile(r"^[A-Za-z0-9_]+-[0-9]+$")


class RunDirError(ValueError):
    """A run directory is missing or unreadable; the message names the file and the fix."""


@dataclass
class KernelResult:
    """The best verified version of one op, and where it came from."""

    op_id: str
    kernel_type: str
    backend: str
    source: str
    source_hash: str
    run_dir: str
    shard: str | None
    gpu: str
    n: int  # experiment number that produced it (0 = starter)
    idea: str
    median_us: float
    p20_us: float | None
    p80_us: float | None
    eager_us: float | None
    compile_us: float | None
    speedup_vs_eager: float | None
    speedup_vs_compile: float | None
    pct_of_ceiling: float | None
    stages: dict[str, str]
    experiments: int  # experiments tried on this op, all shards
    kept: int  # of which kept
    share: float | None  # of the model's profiled time
    amdahl_gain: float | None
    shapes: list[dict[str, Any]] = field(default_factory=list)
    dtype: str | None = None
    modules: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("source")
        return d


@dataclass
class ShardInfo:
    run_dir: str
    shard: str | None
    gpu: str
    agent: str
    experiments: int
    usd: float
    complete: bool  # summary.json present and covers the whole journal
    torn_lines: int  # journal lines that could not be read (a crash mid-write)


@dataclass
class MergedRun:
    kernels: list[KernelResult]  # best verified version per op, largest share first
    others: list[dict[str, Any]]  # ops tried without a verified version: op_id, experiments, last status
    shards: list[ShardInfo]
    plan: dict[str, Any]
    records: list[dict[str, Any]]  # every journal record, tagged with "run_dir"
    end_to_end: dict[str, Any] | None
    gpus: list[str]

    @property
    def experiments(self) -> int:
        # counted as the loop counts (journal.is_experiment): counting the starter baselines too had the H200
        # example's PR say 31 experiments and cross entropy 13 (3 kept) where its optimize table said 28 and 12 (2)
        return sum(1 for r in self.records if is_experiment(r))


def _read_json(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise RunDirError(f"{path} is not JSON ({exc}); the run that wrote it may have been killed: "
                          "delete it and re-run with --resume") from exc
    if data.get("version", RUN_DIR_VERSION) != RUN_DIR_VERSION:
        raise RunDirError(f"{path}: version {data.get('version')!r} is not {RUN_DIR_VERSION}; "
                          "publish it with the autokernel-ci version that wrote it")
    return data


def read_journal(path: Path) -> tuple[list[dict[str, Any]], int]:
    """Records of journal.jsonl and the number of unreadable lines (a torn last write)."""
    records, torn = [], 0
    if not path.is_file():
        return records, torn
    for line in path.read_text(errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            torn += 1
            continue
        if isinstance(rec, dict) and OP_ID_RE.match(str(rec.get("op_id", ""))):
            records.append(rec)
        else:
            torn += 1
    return records, torn


def _gpu_name(settings: dict[str, Any]) -> str:
    gpu = settings.get("gpu") or settings.get("plan", {}).get("gpu") or {}
    if isinstance(gpu, dict):
        return str(gpu.get("name") or gpu.get("key") or "unknown GPU")
    return str(gpu) or "unknown GPU"


def _verified(rec: dict[str, Any]) -> bool:
    stages = rec.get("stages") or {}
    return rec.get("status") == "kept" and all(stages.get(s) == "pass" for s in STAGES) \
        and isinstance(rec.get("median_us"), int | float) and rec["median_us"] > 0


def _find_source(run_dir: Path, op_id: str, digest: str) -> str | None:
    for path in sorted((run_dir / "kernels" / op_id).glob(f"*_{digest}.py")):
        text = path.read_text()
        if source_hash(text) == digest:
            return text
    return None


def _better(a: KernelResult, b: KernelResult) -> bool:
    """Is `a` faster than `b`? Same GPU: lower median time. Different GPUs: a time on one GPU says
    nothing about another, so compare the speedup over eager each measured on its own GPU."""
    if a.gpu == b.gpu or a.speedup_vs_eager is None or b.speedup_vs_eager is None:
        return a.median_us < b.median_us
    return a.speedup_vs_eager > b.speedup_vs_eager


def merge_run_dirs(run_dirs: list[str | Path]) -> MergedRun:
    if not run_dirs:
        raise RunDirError("no run directory given: pass the directories `autokernel-ci optimize --run-dir` wrote")
    best: dict[str, KernelResult] = {}
    tried: dict[str, list[dict[str, Any]]] = {}
    shards: list[ShardInfo] = []
    records_all: list[dict[str, Any]] = []
    plan: dict[str, Any] = {}
    end_to_end: dict[str, Any] | None = None
    for rd in run_dirs:
        run_dir = Path(rd)
        if not run_dir.is_dir():
            raise RunDirError(f"run directory {run_dir} does not exist")
        settings = _read_json(run_dir / "settings.json")
        if settings is None:
            raise RunDirError(f"{run_dir} has no settings.json: it is not a run directory "
                              "(create one with `autokernel-ci optimize --run-dir`)")
        summary = _read_json(run_dir / "summary.json")
        e2e = _read_json(run_dir / "end_to_end.json")
        if e2e is not None:
            end_to_end = e2e
        plan = plan or settings.get("plan") or {}
        plan_ops = {o["id"]: o for o in (settings.get("plan") or {}).get("ops", []) if "id" in o}
        records, torn = read_journal(run_dir / "journal.jsonl")
        gpu = _gpu_name(settings)
        for rec in records:
            records_all.append({**rec, "run_dir": str(run_dir), "gpu": gpu})
            tried.setdefault(rec["op_id"], []).append(rec)
        usd = sum(float(r.get("usd") or 0.0) for r in records)
        summary_n = (summary or {}).get("experiments", (summary or {}).get("budget", {}).get("experiments_used"))
        journal_n = sum(1 for r in records if is_experiment(r))
        shards.append(ShardInfo(
            run_dir=str(run_dir), shard=settings.get("shard"), gpu=gpu, agent=str(settings.get("agent", "?")),
            experiments=journal_n, usd=usd,
            complete=summary is not None and bool(summary.get("finished", True)) and (
                summary_n is None or int(summary_n) >= journal_n),
            torn_lines=torn,
        ))
        for rec in records:
            if not _verified(rec):
                continue
            source = _find_source(run_dir, rec["op_id"], str(rec.get("source_hash", "")))
            if source is None:
                continue
            try:
                kf = parse(source)
            except KernelFileError:
                continue
            op = plan_ops.get(rec["op_id"], {})
            cand = KernelResult(
                op_id=rec["op_id"], kernel_type=kf.kernel_type, backend=kf.backend, source=source,
                source_hash=kf.source_hash, run_dir=str(run_dir), shard=settings.get("shard"), gpu=gpu,
                n=int(rec.get("n", 0)), idea=str(rec.get("idea", "")), median_us=float(rec["median_us"]),
                p20_us=rec.get("p20_us"), p80_us=rec.get("p80_us"), eager_us=rec.get("eager_us"),
                compile_us=rec.get("compile_us"), speedup_vs_eager=rec.get("speedup_vs_eager"),
                speedup_vs_compile=rec.get("speedup_vs_compile"), pct_of_ceiling=rec.get("pct_of_ceiling"),
                stages=dict(rec.get("stages") or {}), experiments=0, kept=0, share=op.get("share"),
                amdahl_gain=op.get("amdahl_gain"), shapes=list(op.get("shapes") or []), dtype=op.get("dtype"),
                modules=list(op.get("modules") or []),
            )
            if rec["op_id"] not in best or _better(cand, best[rec["op_id"]]):
                best[rec["op_id"]] = cand
    for op_id, k in best.items():
        mine = [r for r in tried.get(op_id, []) if is_experiment(r)]
        k.experiments = len(mine)
        k.kept = sum(1 for r in mine if r.get("status") == "kept")
    others = [
        {"op_id": op_id, "experiments": sum(1 for r in recs if is_experiment(r)),
         "last_status": recs[-1].get("status"), "reason": recs[-1].get("reason", "")}
        for op_id, recs in tried.items() if op_id not in best
    ]
    kernels = sorted(best.values(), key=lambda k: (-(k.share or 0.0), k.op_id))
    gpus = sorted({s.gpu for s in shards})
    return MergedRun(kernels=kernels, others=others, shards=shards, plan=plan, records=records_all,
                     end_to_end=end_to_end, gpus=gpus)


def improvements(merged: MergedRun, min_speedup: float) -> list[KernelResult]:
    """The kernels worth publishing: verified and faster than what the model runs today (eager)."""
    return [k for k in merged.kernels if k.speedup_vs_eager is not None and k.speedup_vs_eager > min_speedup]
