"""The bounded agent loop (DESIGN.md §2.3): starters as baselines, then experiments picked by expected
end-to-end gain, verified + benchmarked by the harness, kept only when faster beyond noise.

Order of work:
1. each target op's starter (kernels/<backend>/<type>.py) is evaluated at the plan's shapes and dtype
   with the eager and torch.compile baselines: journal n=0, kept version 0000;
2. repeatedly: pick the op with the largest expected gain (share x remaining headroom to the roofline
   floor / (1 + non-improving streak)); an op rests after `patience` non-improving experiments in a row
   or once within `roofline_margin` of its floor; ask the agent; evaluate; keep if `decide()` says it
   beats the best beyond noise; journal (the commit point); rewrite summary.json;
3. stop when a bound (minutes, experiments, USD) is reached or would be overrun by the next
   experiment's predicted duration, or when no agent has anything left to try.
Several workers (one per GPU) run experiments on different ops at once.
"""

from __future__ import annotations

import functools
import json
import logging
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from autokernel_ci import __version__
from autokernel_ci.agents.base import Agent, AgentState, Proposal, config_hash, family_hash
from autokernel_ci.harness.confirm import DEFAULT_PAIRS, Confirmation, ConfirmRequest
from autokernel_ci.harness.results import BenchResult, Status, Timing, Verdict
from autokernel_ci.kernelfile import KernelFile, KernelFileError, parse
from autokernel_ci.loop.budget import Budget, BudgetUse, stop_reason
from autokernel_ci.loop.interrupt import LoopInterrupted, StopSignals
from autokernel_ci.loop.journal import BEST_DIR, JOURNAL, Journal, atomic_write, kept_version_path
from autokernel_ci.loop.progress import Reporter
from autokernel_ci.loop.summary import build_summary, now_iso
from autokernel_ci.loop.workers import Slot, WorkerPool, import_ref, plan_slots
from autokernel_ci.paths import starter_kernel
from autokernel_ci.plan import Plan, PlanOp

log = logging.getLogger(__name__)

SETTINGS_VERSION = 1
# Headroom assumed when the floor is unknown (CPU runs, unknown GPU): half the op's time can go.
DEFAULT_HEADROOM = 0.5
SCREENED_AGENT = "search"  # whose candidates LoopSettings.screen benchmarks before verifying
STATUS_OF = {Status.FAIL: "rejected", Status.CRASH: "crash", Status.TIMEOUT: "timeout", Status.OOM: "oom",
             Status.COMPILE_ERROR: "compile_error", Status.INVALID: "invalid", Status.NOT_RUN: "rejected"}


@dataclass
class LoopSettings:
    agent: str = "search"  # "search" | "llm"
    llm_model: str | None = None
    budget: Budget = field(default_factory=Budget)
    device: str = "cuda"
    shard: str | None = None
    backend: str = "triton"
    seed: int = 0
    workers: int | None = None  # None: one per visible GPU (1 on cpu)
    gpu_indices: list[int] | None = None
    patience: int = 8  # non-improving experiments in a row before the op rests
    roofline_margin: float = 0.05  # an op within 5% of its floor is done (the floor's own error is ~5%)
    tune_after_llm: int = 6  # search experiments on each kept LLM kernel that exposes SEARCH_SPACE
    timeout_s: float = 300.0  # one evaluation; the harness kills the worker's process group after it
    verify_shape_sets: tuple[str, ...] | None = None  # None: the harness default for the device
    evaluator: str = "autokernel_ci.harness:Evaluator"
    decide: str = "autokernel_ci.harness:decide"
    # Benchmark a search-agent candidate first and verify it only if decide() would keep it: a slower point is
    # reverted unverified (nothing unverified is ever kept). LLM candidates are always verified: their reply
    # to a failed stage is the next attempt.
    screen: bool = True
    # A candidate decide() would keep is re-timed in turn with the best this many times (best first in each pair)
    # and kept only if it wins every pair (harness/confirm.py: drift between timings seconds apart made a
    # launch-identical CONFIG look 2.3% faster on an H100). 0: keep on the first timing.
    confirm_pairs: int = DEFAULT_PAIRS
    quiet: bool = False

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["budget"] = self.budget.to_dict()
        return d


@dataclass
class Job:
    op_id: str
    source: str
    proposal: Proposal
    baseline: bool
    parent_hash: str | None
    best_us_before: float | None
    started: float  # time.time() when the proposal was asked for


@dataclass
class OpState:
    op: PlanOp
    best: KernelFile | None = None
    best_timing: Timing | None = None
    best_us: float | None = None
    starter_us: float | None = None
    eager_us: float | None = None
    compile_us: float | None = None
    floor_us: float | None = None
    failed: str = ""
    streak: int = 0  # non-improving experiments in a row
    exhausted: set[str] = field(default_factory=set)  # agents with nothing left for this op
    has_baseline: bool = False


def _timing(record: dict[str, Any]) -> Timing | None:
    if record.get("median_us") is None:
        return None
    return Timing(record["median_us"], record["p20_us"], record["p80_us"], record.get("samples") or 0)


def measure(bench: BenchResult) -> dict[str, Any]:
    """One op's numbers from a BenchResult over its shapes: times add up (the op runs at every shape)."""
    rows = bench.rows
    total_timing = bench.total()
    out: dict[str, Any] = {
        "median_us": total_timing.median_us, "p20_us": total_timing.p20_us, "p80_us": total_timing.p80_us,
        "samples": total_timing.samples, "metric": rows[0].metric if rows else None,
    }
    total = out["median_us"]
    # aggregate throughput = total work / total time = sum(value_i * t_i) / sum(t_i)
    out["value"] = sum(r.value * r.candidate.median_us for r in rows) / total if total else None
    floors = [r.floor_us for r in rows]
    out["floor_us"] = sum(floors) if floors and all(f is not None for f in floors) else None
    out["pct_of_ceiling"] = round(100.0 * out["floor_us"] / total, 2) if out["floor_us"] and total else None
    eager = [r.eager for r in rows]
    comp = [r.compiled for r in rows]
    out["eager_us"] = sum(t.median_us for t in eager) if eager and all(eager) else None
    out["compile_us"] = sum(t.median_us for t in comp) if comp and all(comp) else None
    return out


class Orchestrator:
    def __init__(self, plan: Plan, run_dir: Path, settings: LoopSettings, *, resume: bool,
                 agents: dict[str, Agent] | None = None):
        self.plan = plan
        self.run_dir = run_dir
        self.settings = settings
        self.resume = resume
        self.reporter = Reporter(run_dir, quiet=settings.quiet)
        self.stop: str | None = None
        self.session_start = time.time()
        self._agents = agents or {}
        self._decide = None

    # -- setup ---------------------------------------------------------------------------------------
    def _settings_record(self) -> dict[str, Any]:
        path = self.run_dir / "settings.json"
        s = self.settings
        if self.resume and path.exists():
            record = json.loads(path.read_text())
            if record.get("version") != SETTINGS_VERSION:
                raise ValueError(f"{path}: settings version {record.get('version')!r} is not {SETTINGS_VERSION}")
            stored = Plan.from_dict(record["plan"], f"{path} (plan)")
            if [o.id for o in stored.targets()] != [o.id for o in self.plan.targets()]:
                log.warning("--resume: the plan given differs from the run's; continuing with the run's plan")
            self.plan = stored
            record.setdefault("sessions", []).append({"resumed": now_iso(), "budget": s.budget.to_dict()})
            record["budget"] = s.budget.to_dict()  # new bounds apply to the cumulative use
        else:
            record = {"version": SETTINGS_VERSION, "plan": self.plan.to_dict(), "agent": s.agent,
                      "llm_model": s.llm_model, "budget": s.budget.to_dict(), "shard": s.shard,
                      "gpu": self.plan.gpu or {}, "device": s.device, "seed": s.seed, "backend": s.backend,
                      "started": now_iso(), "autokernel_ci": __version__,
                      "loop": {k: v for k, v in s.to_dict().items() if k not in ("budget",)}}
        atomic_write(path, json.dumps(record, indent=2) + "\n")
        return record

    def _agent(self, name: str) -> Agent:
        if name not in self._agents:
            if name == "search":
                from autokernel_ci.agents.search import SearchAgent

                self._agents[name] = SearchAgent(seed=self.settings.seed)
            elif name == "llm":
                from autokernel_ci.agents.llm import LLMAgent, LLMSettings

                self._agents[name] = LLMAgent(LLMSettings.from_env(self.settings.llm_model))
            else:
                raise ValueError(f"--agent {name!r} is not one of search, llm")
        return self._agents[name]

    def _rebuild(self) -> None:
        """Op states from the journal (a fresh run has none)."""
        self.ops = {op.id: OpState(op) for op in self.plan.targets()}
        self.use = BudgetUse(elapsed_s=max((r.get("elapsed_s", 0.0) for r in self.journal.records), default=0.0))
        for record in self.journal.records:
            state = self.ops.get(record["op_id"])
            if record["n"] >= 1:  # baselines neither count nor predict an experiment (BudgetUse.predict_next_s)
                self.use.record(record.get("duration_s", 0.0), record.get("usd", 0.0))
            if state is None:
                continue
            self._apply(state, record)

    def _apply(self, state: OpState, record: dict[str, Any]) -> None:
        if record["n"] == 0:
            state.has_baseline = True
            state.eager_us, state.compile_us = record.get("eager_us"), record.get("compile_us")
            if record["status"] != "kept":
                state.failed = record.get("reason") or record["status"]
        if record.get("floor_us"):
            state.floor_us = record["floor_us"]
        if record["status"] == "kept":
            path = kept_version_path(self.run_dir, state.op.id, record["n"], record["source_hash"])
            state.best = parse(path.read_text(), path)
            state.best_timing = _timing(record)
            state.best_us = record.get("median_us")
            if record["n"] == 0:
                state.starter_us = state.best_us
            state.streak = 0
        elif record["n"] >= 1:
            state.streak += 1
            retimed = (record.get("confirm") or {}).get("best")
            if retimed and state.best is not None and record.get("parent_hash") == state.best.source_hash:
                # the keep was not confirmed: what the best takes now, not its first timing, is what the next
                # candidates must beat (harness/confirm.py); rebuilt from the journal on resume
                state.best_timing = Timing(**retimed)

    # -- choosing the next experiment -----------------------------------------------------------------
    def elapsed(self) -> float:
        return self.use.elapsed_s + (time.time() - self.session_start)

    def headroom(self, state: OpState) -> float:
        if state.floor_us and state.best_us and self.settings.device == "cuda":
            return max(0.0, 1.0 - state.floor_us / state.best_us)
        return DEFAULT_HEADROOM

    def at_roofline(self, state: OpState) -> bool:
        return self.settings.device == "cuda" and self.headroom(state) <= self.settings.roofline_margin

    def score(self, state: OpState) -> float:
        """Expected end-to-end gain of one more experiment on this op (Amdahl, diminishing returns)."""
        return max(state.op.share, 1e-6) * self.headroom(state) / (1.0 + state.streak)

    def _agent_for(self, state: OpState) -> str:
        if self.settings.agent != "llm":
            return "search"
        history = self.journal.for_op(state.op.id)
        kept_llm = [r for r in history if r["status"] == "kept" and r.get("agent") == "llm"]
        if kept_llm and "search" not in state.exhausted:
            since = [r for r in history if r["n"] > kept_llm[-1]["n"] and r.get("agent") == "search"]
            if len(since) < self.settings.tune_after_llm:
                return "search"
        return "llm"

    def agent_state(self, state: OpState, n: int) -> AgentState:
        history = self.journal.for_op(state.op.id)
        measured = {r["source_hash"] for r in history} | {r["config_hash"] for r in history if r.get("config_hash")}
        return AgentState(op_id=state.op.id, kernel_type=state.op.kernel_type, dtype=state.op.dtype,
                          shapes=state.op.shapes, best=state.best, n=n, seed=self.settings.seed,
                          best_us=state.best_us, starter_us=state.starter_us, eager_us=state.eager_us,
                          compile_us=state.compile_us, floor_us=state.floor_us, history=history,
                          measured=measured, gpu=self.settings_record.get("gpu") or {},
                          device=self.settings.device)

    def next_job(self, in_flight: set[str]) -> Job | None:
        for state in self.ops.values():  # baselines first, in plan order (largest gain first)
            if not state.has_baseline and state.op.id not in in_flight:
                if self.settings.budget.minutes is not None and self.elapsed() >= self.settings.budget.minutes * 60:
                    self.stop = "time budget reached before every starter was measured"
                    return None
                return self._baseline_job(state)
        self.stop = self.stop or stop_reason(self.settings.budget, self.use, self.elapsed(), in_flight=len(in_flight))
        if self.stop:
            return None
        while True:
            candidates = [s for s in self.ops.values() if s.has_baseline and not s.failed and s.best is not None
                          and s.op.id not in in_flight and not self.at_roofline(s)
                          and self._agent_for(s) not in s.exhausted]
            if not candidates:
                return None
            fresh = [s for s in candidates if s.streak < self.settings.patience]
            if not fresh:  # every op rested: a new round, still led by expected gain
                for s in candidates:
                    s.streak = 0
                log.info("every op had %d non-improving experiments in a row: starting a new round",
                         self.settings.patience)
                fresh = candidates
            state = max(fresh, key=lambda s: (self.score(s), -list(self.ops).index(s.op.id)))
            name = self._agent_for(state)
            started = time.time()
            proposal = self._agent(name).propose(self.agent_state(state, self.journal.next_n()))
            if proposal is None:
                state.exhausted.add(name)
                continue
            proposal.agent = proposal.agent or name
            return Job(state.op.id, proposal.source, proposal, False, state.best.source_hash, state.best_us, started)

    def _baseline_job(self, state: OpState) -> Job:
        path = starter_kernel(state.op.kernel_type, self.settings.backend)
        source = path.read_text()
        return Job(state.op.id, source, Proposal(source, "starter", agent="starter"), True, None, None, time.time())

    # -- running it ----------------------------------------------------------------------------------
    def eval_kwargs(self, job: Job) -> dict[str, Any]:
        state = self.ops[job.op_id]
        kwargs: dict[str, Any] = {"verify_shape_sets": self.settings.verify_shape_sets,
                                  "extra_shapes": tuple(state.op.shapes), "bench_shapes": list(state.op.shapes),
                                  "dtype": state.op.dtype, "baselines": job.baseline}
        if (self.settings.screen and not job.baseline and job.proposal.agent == SCREENED_AGENT
                and state.best_timing is not None):
            kwargs["screen"] = functools.partial(self._decide_fn(), best=state.best_timing)
        if (self.settings.confirm_pairs > 0 and not job.baseline and state.best is not None
                and state.best_timing is not None):
            kwargs["confirm"] = ConfirmRequest(state.best.source, state.best_timing, self._decide_fn(),
                                               self.settings.confirm_pairs)
        return kwargs

    def _decide_fn(self) -> Any:
        if self._decide is None:
            self._decide = import_ref(self.settings.decide)
        return self._decide

    def _decide_keep(self, state: OpState, timing: Timing) -> tuple[bool, dict[str, Any]]:
        if state.best_timing is None:
            return True, {}
        decision = self._decide_fn()(timing, state.best_timing)
        return bool(decision.keep), {"speedup_vs_best": round(decision.speedup, 4), "noise": decision.noise,
                                     "decision": decision.reason}

    def commit(self, job: Job, payload: dict[str, Any]) -> None:
        state = self.ops[job.op_id]
        n = 0 if job.baseline else self.journal.next_n()
        record: dict[str, Any] = {"n": n, "time": now_iso(), "op_id": job.op_id, "kernel_type": state.op.kernel_type,
                                  "agent": job.proposal.agent, "idea": job.proposal.idea, "source_hash": "",
                                  "config_hash": None, "family": None, "config": job.proposal.config,
                                  "parent_hash": job.parent_hash, "status": "invalid", "stages": {}, "reason": "",
                                  "median_us": None, "p20_us": None, "p80_us": None, "samples": None,
                                  "best_us_before": job.best_us_before, "eager_us": state.eager_us,
                                  "compile_us": state.compile_us}
        kernel: KernelFile | None = None
        if job.source:
            from autokernel_ci.kernelfile import source_hash

            record["source_hash"] = source_hash(job.source)
            try:
                kernel = parse(job.source)
                record["config_hash"], record["family"] = config_hash(kernel), family_hash(kernel)
            except KernelFileError:
                kernel = None
        verdict = bench = None
        if job.proposal.invalid:
            record["reason"] = job.proposal.invalid
        elif "error" in payload:
            record["status"], record["reason"] = "crash", payload["error"].strip().splitlines()[0][:500]
        else:
            verdict = Verdict.from_dict(payload["verdict"])
            bench = BenchResult.from_dict(payload["bench"]) if payload.get("bench") else None
            record["stages"] = {s.name: str(s.status) for s in verdict.stages}
            record["reason"] = verdict.reason
            if verdict.status in (Status.PASS, Status.UNVERIFIED) and bench is not None and bench.rows:
                numbers = measure(bench)
                if job.baseline:
                    record["eager_us"], record["compile_us"] = numbers["eager_us"], numbers["compile_us"]
                record.update({k: numbers[k] for k in ("median_us", "p20_us", "p80_us", "samples", "metric",
                                                       "value", "floor_us", "pct_of_ceiling")})
                try:
                    keep, extra = self._decide_keep(state, _timing(record))
                except (TypeError, ValueError) as exc:  # a harness bug must cost one experiment, not the run
                    record["status"], record["reason"] = "crash", f"decide() failed: {type(exc).__name__}: {exc}"
                else:
                    record.update(extra)
                    if keep and bench.confirmation is not None:
                        confirmation = Confirmation.from_dict(bench.confirmation)
                        record["confirm"] = bench.confirmation
                        if not confirmation.confirmed:
                            keep, record["decision"] = False, f"{record['decision']}; {confirmation.reason}"
                    record["status"] = "kept" if keep and verdict.passed else "reverted"
            elif verdict.status is Status.PASS:
                record["status"], record["reason"] = "crash", "verified but the benchmark returned no timings"
            else:
                record["status"] = STATUS_OF.get(verdict.status, "rejected")
        for key in ("eager_us", "compile_us"):
            if record["median_us"] and record[key]:
                record[f"speedup_vs_{key[:-3]}"] = round(record[key] / record["median_us"], 4)
        starter = state.starter_us if not job.baseline else record["median_us"]
        if record["median_us"] and starter:
            record["speedup_vs_starter"] = round(starter / record["median_us"], 4)
        record["usd"] = round(job.proposal.usd, 6)
        record["duration_s"] = round(time.time() - job.started, 3)
        record["elapsed_s"] = round(self.elapsed(), 3)
        if "window" in payload:
            record["slot"], record["window"] = payload.get("slot"), payload["window"]
        if record["status"] == "kept" and kernel is not None:
            self.journal.store_version(job.op_id, n, record["source_hash"], job.source)
            sidecar = kept_version_path(self.run_dir, job.op_id, n, record["source_hash"]).with_suffix(".json")
            atomic_write(sidecar, json.dumps({"verdict": verdict.to_dict() if verdict else None,
                                              "bench": bench.to_dict() if bench else None}, indent=1) + "\n")
        elif record["status"] == "kept":
            record["status"], record["reason"] = "invalid", "kept source does not parse as a kernel file"
        self.journal.append(record)  # the commit point
        self._apply(state, record)
        if n >= 1:
            self.use.record(record["duration_s"], record["usd"])
        if record["status"] == "kept":
            atomic_write(self.run_dir / BEST_DIR / f"{job.op_id}.py", job.source)
        self.reporter.experiment(record)
        self.write_summary(finished=False)
        self.reporter.plot(self.journal.records)

    def write_summary(self, *, finished: bool) -> dict[str, Any]:
        summary = build_summary(self.plan, self.journal.records, self.settings_record, elapsed_s=self.elapsed(),
                                stopped=self.stop, finished=finished, backend=self.settings.backend)
        self.reporter.write_summary(summary)
        return summary

    def _sync_best(self) -> None:
        """best/<op>.py from the journal (a kill between commit and this copy leaves it stale)."""
        best_dir = self.run_dir / BEST_DIR
        for state in self.ops.values():
            target = best_dir / f"{state.op.id}.py"
            if state.best is not None and (not target.exists() or target.read_text() != state.best.source):
                atomic_write(target, state.best.source)

    def idle_reason(self) -> str:
        states = list(self.ops.values())
        if states and all(s.failed for s in states):
            return "no op has a starter that passes verification"
        if states and all(s.failed or self.at_roofline(s) for s in states):
            return f"every op is within {self.settings.roofline_margin:.0%} of its roofline floor"
        if not states:
            return "the plan has no target ops (for this shard)"
        return "the agents have nothing left to try"

    def run(self) -> dict[str, Any]:
        self.journal = Journal.open(self.run_dir, resume=self.resume)
        self.settings_record = self._settings_record()
        self._rebuild()
        self._sync_best()
        slots: list[Slot] = plan_slots(self.settings.device, self.settings.workers, self.settings.gpu_indices)
        self.reporter.start(f"autokernel-ci optimize: {len(self.ops)} op(s), agent {self.settings.agent}, "
                            f"{len(slots)} worker(s) on {', '.join(s.label for s in slots)}; run dir {self.run_dir} "
                            f"(whole failure reasons in its {JOURNAL})"
                            + (f"; resuming after experiment {self.journal.next_n() - 1}" if self.resume else ""))
        pool = WorkerPool(slots, lock_dir=self.run_dir / "locks", evaluator_ref=self.settings.evaluator,
                          timeout_s=self.settings.timeout_s)
        jobs: dict[int, Job] = {}
        signals = StopSignals()
        try:
            with signals:
                self._drive(pool, jobs, signals)
        finally:
            pool.close(abort=signals.received is not None)
            for agent in self._agents.values():
                agent.close()
        # finished: False for an interrupted run, so publish's merge calls that shard incomplete
        summary = self.write_summary(finished=signals.received is None)
        self.reporter.plot(self.journal.records, force=True)
        self.reporter.finish(summary)
        if signals.received is not None:
            raise LoopInterrupted(signals.received, summary, self.run_dir)
        return summary

    def _drive(self, pool: WorkerPool, jobs: dict[int, Job], signals: StopSignals) -> None:
        """Submit and commit experiments until a bound, an idle agent or a signal stops the loop."""
        try:
            pool.start()
        except RuntimeError:
            if signals.received is None:
                raise
        while True:
            if signals.received is not None:
                # The experiments in flight are dropped, not journaled: a half-run candidate has no verdict,
                # and --resume proposes again from the last committed experiment.
                self.stop = (f"interrupted by {signals.received} with {len(jobs)} experiment(s) in flight "
                             f"(dropped); continue with --resume")
                return
            while pool.free() and self.stop is None and signals.received is None:
                job = self.next_job({j.op_id for j in jobs.values()})
                if job is None:
                    break
                if job.proposal.invalid:
                    self.commit(job, {})
                    continue
                jobs[id(job)] = job
                pool.submit(pool.free()[0], job, job.source, self.eval_kwargs(job))
            if pool.busy() == 0:
                self.stop = self.stop or self.idle_reason()
                return
            for done in pool.wait(timeout=5.0, wake=signals):
                if signals.received is not None:
                    break
                jobs.pop(id(done.task), None)
                self.commit(done.task, done.payload)


def optimize(plan: Plan, run_dir: str | Path, settings: LoopSettings, *, resume: bool = False,
             agents: dict[str, Agent] | None = None) -> dict[str, Any]:
    """Run (or resume) the loop over `plan` into `run_dir`; returns summary.json's content."""
    run_dir = Path(run_dir)
    if not resume and run_dir.exists() and any(run_dir.iterdir()):
        if (run_dir / "journal.jsonl").exists():
            raise FileExistsError(f"{run_dir} already holds a run: pass --resume to continue it, or choose a new "
                                  "--run-dir")
    run_dir.mkdir(parents=True, exist_ok=True)
    if not resume:
        shutil.rmtree(run_dir / "locks", ignore_errors=True)
    return Orchestrator(plan, run_dir, settings, resume=resume, agents=agents).run()
