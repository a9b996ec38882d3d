"""Evaluator: the parent side of a warm sandboxed worker, and the verify()/bench() entry points.

The worker process keeps torch and triton imported between candidates (importing them costs
seconds; the loop runs hundreds of candidates). It is replaced after anything that can leave it
unreliable: a crash, a timeout (its whole process group is killed), an OOM or CUDA error on the
GPU, or a candidate that tampered with the checker.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from autokernel_ci import kernelfile
from autokernel_ci.harness import sandbox
from autokernel_ci.harness.confirm import ConfirmRequest, judge, unfinished
from autokernel_ci.harness.decide import Decision
from autokernel_ci.harness.devices import default_device
from autokernel_ci.harness.protocol import PROGRESS_FILE, Channel, ChannelClosed, ChannelTimeout
from autokernel_ci.harness.results import STAGES, BenchResult, CheckFailure, StageResult, Status, Timing, Verdict

# torch + triton import and CUDA init: ~3-8 s warm, a minute on a cold file cache.
STARTUP_TIMEOUT_S = 300.0
# One request (a verify, a bench) may take this long. A full verify of an honest Triton softmax in
# every dtype and shape set, in a fresh worker, took 108.9 s on the H200 (one compile per row width
# and dtype): 120 s was too close. The loop's evaluations are narrower (~2 s) and use --timeout.
DEFAULT_TIMEOUT_S = 300.0
LOG_TAIL_CHARS = 2000


class HarnessError(RuntimeError):
    """The harness itself failed (the worker could not start): not the candidate's fault."""


class _WorkerLost(Exception):
    def __init__(self, status: Status, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


class Evaluator:
    """Verify and benchmark candidates in a warm sandboxed worker. Use as a context manager."""

    def __init__(self, device: str | None = None, *, timeout_s: float = DEFAULT_TIMEOUT_S,
                 gpu_index: int | None = None) -> None:
        self.device = device or default_device()
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"device must be 'cpu' or 'cuda', got {self.device!r}")
        self.timeout_s = float(timeout_s)
        self.gpu_index = gpu_index
        self._dir = Path(tempfile.mkdtemp(prefix="autokernel-worker-"))
        self._proc = None
        self._workdir: Path | None = None  # the current worker's work directory
        self._channel: Channel | None = None
        self._next_id = 0
        self._count = 0
        self._started = False
        self.restarts = 0  # workers started after the first (crash, timeout, tampering, CUDA error)
        self.last_startup_s: float | None = None

    # -- lifecycle -------------------------------------------------------------------------------
    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stop_worker(graceful=True)
        shutil.rmtree(self._dir, ignore_errors=True)

    def abort(self) -> None:
        """Kill the worker's process group now, mid-candidate or not (a loop stopped by a signal)."""
        self._stop_worker(graceful=False)
        shutil.rmtree(self._dir, ignore_errors=True)

    def __del__(self) -> None:  # a forgotten Evaluator must not leave a worker behind
        try:
            self._stop_worker(graceful=False)
        except Exception:  # noqa: BLE001
            pass

    @property
    def worker_pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def _env(self) -> dict[str, str]:
        extra = {"PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}
        if self.gpu_index is not None:
            extra["CUDA_VISIBLE_DEVICES"] = str(self.gpu_index)
        if self.device == "cpu":
            extra.setdefault("TRITON_INTERPRET", "1")
        return sandbox.scrubbed_env(extra=extra)

    def _start_worker(self) -> None:
        if self._started:
            self.restarts += 1
        self._started = True
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        workdir = self._workdir = self._dir / f"w{self.restarts}"
        workdir.mkdir(parents=True, exist_ok=True)
        self._log = self._dir / f"worker{self.restarts}.log"
        argv = ["-m", "autokernel_ci.harness.worker", "--fd-in", str(to_child_r), "--fd-out", str(from_child_w),
                "--device", self.device, "--workdir", str(workdir), "--parent-pid", str(os.getpid())]
        t0 = time.perf_counter()
        self._proc = sandbox.spawn(argv, env=self._env(), cwd=workdir, log_path=self._log,
                                   pass_fds=(to_child_r, from_child_w))
        os.close(to_child_r)
        os.close(from_child_w)
        self._channel = Channel(from_child_r, to_child_w)
        try:
            ready = self._channel.recv(STARTUP_TIMEOUT_S)
        except (ChannelClosed, ChannelTimeout) as exc:
            tail = self._log_tail(0)
            self._stop_worker(graceful=False)
            raise HarnessError(f"the harness worker did not start ({exc}); its log ends:\n{tail}") from None
        if ready.get("op") != "ready":
            self._stop_worker(graceful=False)
            raise HarnessError(f"unexpected first message from the worker: {ready!r}")
        self.last_startup_s = round(time.perf_counter() - t0, 3)

    def _stop_worker(self, *, graceful: bool) -> None:
        proc, channel = self._proc, self._channel
        if proc is None:
            return
        if graceful and proc.poll() is None and channel is not None:
            try:
                self._next_id += 1
                channel.send({"op": "shutdown", "id": self._next_id})
                channel.recv(10.0)
            except (ChannelClosed, ChannelTimeout, OSError):
                pass
        self._kill_worker()

    def _log_tail(self, offset: int) -> str:
        try:
            with open(self._log, "rb") as f:
                f.seek(offset)
                data = f.read()
        except OSError:
            return ""
        return data.decode(errors="replace")[-LOG_TAIL_CHARS:].strip()

    def _request(self, message: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        if self._proc is None or self._proc.poll() is not None or self._channel is None:
            if self._proc is not None:
                self._kill_worker()
            self._start_worker()
        self._next_id += 1
        message = {**message, "id": self._next_id}
        offset = self._log.stat().st_size if self._log.exists() else 0
        try:
            self._channel.send(message)
            reply = self._channel.recv(timeout_s)
        except ChannelTimeout:
            where = self._progress()
            self._kill_worker()
            raise _WorkerLost(Status.TIMEOUT, f"no result within {timeout_s:.0f} s: the worker's process group "
                              "was killed (a hang or an infinite loop in the kernel?)"
                              + (f"; it was last at: {where} (raise --timeout if that is a long compile "
                                 "sweep, not a hang)" if where else "")) from None
        except (ChannelClosed, BrokenPipeError, OSError):
            try:
                code = self._proc.wait(timeout=10)
            except Exception:  # noqa: BLE001
                code = None
            tail = self._log_tail(offset)
            self._kill_worker()
            raise _WorkerLost(Status.CRASH, f"the worker died ({sandbox.describe_exit(code)}) while running the "
                              f"kernel: it was replaced.\n{tail}") from None
        if reply.get("id") != message["id"]:
            self._kill_worker()
            raise _WorkerLost(Status.CRASH, "the worker answered out of turn (forged or corrupted reply): replaced")
        if reply.get("dirty"):
            self._kill_worker()
        return reply

    def _progress(self) -> str:
        """Where the worker's verification was (its own report; one line, bounded): for timeout messages."""
        if self._workdir is None:
            return ""
        try:
            text = (self._workdir / PROGRESS_FILE).read_text(errors="replace")
        except OSError:
            return ""
        return " ".join(text.split())[:200]

    def _kill_worker(self) -> None:
        if self._proc is not None:
            sandbox.kill_group(self._proc)
        if self._channel is not None:
            self._channel.close()
        self._proc, self._channel = None, None

    # -- candidates ------------------------------------------------------------------------------
    def _write(self, source: str) -> Path:
        self._count += 1
        path = self._dir / "candidates" / f"c{self._count:05d}_{kernelfile.source_hash(source)}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
        return path

    def _load(self, source: str, label: str) -> tuple[kernelfile.KernelFile | None, Verdict | None]:
        """Static contract in this process, then import in the worker. A Verdict means: stop here."""
        t0 = time.perf_counter()
        try:
            kf = kernelfile.parse(source, Path(label))  # the label (its path) names the file in contract errors
        except kernelfile.KernelFileError as exc:
            return None, _verdict(label, source, None, self.device, Status.INVALID, "contract", str(exc), t0)
        if kf.backend == "cuda" and self.device != "cuda":
            return kf, _verdict(label, source, kf, self.device, Status.INVALID, "backend",
                                "BACKEND='cuda' needs a GPU: verify it with device='cuda'", t0)
        path = self._write(source)
        try:
            reply = self._request({"op": "load", "path": str(path)}, self.timeout_s)
        except _WorkerLost as lost:
            return kf, _verdict(label, source, kf, self.device, lost.status, "load", lost.reason, t0)
        if not reply.get("ok"):
            return kf, _verdict(label, source, kf, self.device, Status(reply["status"]), reply.get("check", "load"),
                                reply.get("reason", ""), t0)
        return kf, None

    def verify_source(self, source: str, *, shape_sets: Sequence[str] | None = None,
                      extra_shapes: Sequence[dict] = (), seed: int | None = None,
                      dtypes: Sequence[Any] | None = None, label: str = "<source>",
                      timeout_s: float | None = None) -> Verdict:
        t0 = time.perf_counter()
        _check_options(source, shape_sets, dtypes)
        kf, early = self._load(source, label)
        if early is not None:
            return early
        # The seed is drawn now, after the import finished in the worker, and sent only now.
        seed = int.from_bytes(os.urandom(8), "little") >> 1 if seed is None else int(seed)
        message = {"op": "verify", "seed": seed, "shape_sets": list(shape_sets) if shape_sets is not None else None,
                   "extra_shapes": [dict(s) for s in extra_shapes], "dtypes": _dtype_names(dtypes), "label": label}
        try:
            reply = self._request(message, timeout_s or self.timeout_s)
        except _WorkerLost as lost:
            return _verdict(label, source, kf, self.device, lost.status, lost.status.value, lost.reason, t0)
        if "verdict" not in reply:
            return _verdict(label, source, kf, self.device, Status.CRASH, "harness", reply.get("error", "no verdict"),
                            t0)
        verdict = Verdict.from_dict(reply["verdict"])
        verdict.duration_s = round(time.perf_counter() - t0, 3)
        return verdict

    def bench_source(self, source: str, *, shapes: Sequence[dict] | None = None, dtypes: Sequence[Any] | None = None,
                     compile_baseline: bool = True, eager_baseline: bool = True, label: str = "<source>",
                     loaded: bool = False) -> BenchResult | Verdict:
        """A BenchResult, or the Verdict explaining why the candidate could not be benchmarked."""
        t0 = time.perf_counter()
        kf = kernelfile.parse(source) if loaded else None
        if not loaded:
            kf, early = self._load(source, label)
            if early is not None:
                return early
        message = {"op": "bench", "shapes": [dict(s) for s in shapes] if shapes else None,
                   "dtypes": _dtype_names(dtypes), "compile": compile_baseline, "eager": eager_baseline,
                   "label": label, "seed": int.from_bytes(os.urandom(4), "little")}
        try:
            reply = self._request(message, self.timeout_s)
        except _WorkerLost as lost:
            return _verdict(label, source, kf, self.device, lost.status, f"bench_{lost.status.value}", lost.reason, t0)
        if "bench" not in reply:
            return _verdict(label, source, kf, self.device, Status(reply.get("status", "crash")), "bench",
                            reply.get("error", "no benchmark result"), t0)
        return BenchResult.from_dict(reply["bench"])

    def evaluate(self, source: str, *, verify_shape_sets: Sequence[str] | None = None,
                 extra_shapes: Sequence[dict] = (), bench_shapes: Sequence[dict] | None = None,
                 dtype: Any = None, baselines: bool = True, seed: int | None = None,
                 label: str = "<source>",
                 screen: Callable[[Timing], Decision] | None = None,
                 confirm: ConfirmRequest | None = None) -> tuple[Verdict, BenchResult | None]:
        """Verify, then (only if it passed) benchmark. `dtype` restricts both to the model's dtype;
        `baselines=False` times the candidate alone (eager/compile already known to the caller).

        `screen` (decide() against the best so far, e.g. `functools.partial(decide, best=timing)`) turns the
        order round for a candidate that only matters if it is faster: benchmark first, verify only one the
        screen keeps. A slower one comes back as Status.UNVERIFIED with its timings and no stage run; nothing
        unverified is ever kept, and a benchmark that caught cheating still rejects it (Status.FAIL).

        `confirm` (harness.confirm.ConfirmRequest: the best's source and timing, the loop's decide()) re-times a
        passed candidate that decide() would keep in turn with the best, and puts the Confirmation on the
        BenchResult (`confirmation`); the loop keeps only a confirmed one."""
        dtypes = [dtype] if dtype is not None else None
        verify = dict(shape_sets=verify_shape_sets, extra_shapes=extra_shapes, seed=seed, dtypes=dtypes, label=label)
        if screen is not None:
            verdict, result = self._screened(source, screen, verify, bench_shapes=bench_shapes, baselines=baselines)
        else:
            verdict, result = self._verified_first(source, verify, bench_shapes=bench_shapes, baselines=baselines)
        if confirm is not None and verdict.passed and result is not None and result.rows:
            t0 = time.perf_counter()
            self._confirm(source, confirm, verdict, result, bench_shapes=bench_shapes, dtypes=dtypes)
            verdict.duration_s = round(verdict.duration_s + time.perf_counter() - t0, 3)
            if not verdict.passed:  # its re-timing caught it cheating: no timings go back with a rejection
                return verdict, None
        return verdict, result

    def _verified_first(self, source: str, verify: dict[str, Any], *, bench_shapes: Sequence[dict] | None,
                        baselines: bool) -> tuple[Verdict, BenchResult | None]:
        dtypes, label = verify["dtypes"], verify["label"]
        verdict = self.verify_source(source, **verify)
        if not verdict.passed:
            return verdict, None
        t0 = time.perf_counter()
        result = self.bench_source(source, shapes=bench_shapes, dtypes=dtypes, compile_baseline=baselines,
                                   eager_baseline=baselines, label=label, loaded=self.worker_pid is not None)
        if isinstance(result, Verdict):  # crashed or hung under benchmark
            result.duration_s = round(verdict.duration_s + time.perf_counter() - t0, 3)
            return result, None
        fold_bench_checks(verdict, result)
        verdict.duration_s = round(verdict.duration_s + time.perf_counter() - t0, 3)
        return verdict, result

    def _confirm(self, source: str, request: ConfirmRequest, verdict: Verdict, result: BenchResult, *,
                 bench_shapes: Sequence[dict] | None, dtypes: Sequence[Any] | None) -> None:
        """Re-time a passed candidate that decide() would keep, best first in each of `request.pairs` pairs, at the
        same shapes and dtype without baselines; the Confirmation goes on `result`. A check the candidate's
        re-timing fails (tampering, below the physical floor) rejects it, as in its first benchmark."""
        if not request.decide(result.total(), request.best).keep:
            return  # the loop reverts it anyway: nothing to confirm
        pairs: list[tuple[Timing, Timing]] = []
        for _ in range(request.pairs):
            pair = []
            for which, timed_source in (("best", request.best_source), ("candidate", source)):
                bench = self.bench_source(timed_source, shapes=bench_shapes, dtypes=dtypes, compile_baseline=False,
                                          eager_baseline=False, label=f"{verdict.kernel} (confirm: {which})")
                if isinstance(bench, Verdict) or not bench.rows:
                    why = bench.reason if isinstance(bench, Verdict) else "the benchmark returned no timings"
                    done = [(b.median_us, c.median_us) for b, c in pairs]
                    result.confirmation = unfinished(f"re-timing the {which} failed: {why}", done).to_dict()
                    return
                if which == "candidate":
                    fold_bench_checks(verdict, bench)
                    if not verdict.passed:
                        return
                pair.append(bench.total())
            pairs.append((pair[0], pair[1]))
        result.confirmation = judge(pairs, request.decide).to_dict()

    def _screened(self, source: str, screen: Callable[[Timing], Decision], verify: dict[str, Any], *,
                  bench_shapes: Sequence[dict] | None, baselines: bool) -> tuple[Verdict, BenchResult | None]:
        """evaluate() with the benchmark first. Most search experiments are slower than the best, and verifying a
        GEMM at every shape set is most of an experiment: 28.5 s verified first against 0.66-2.26 s timed only
        (matmul, bf16, LLaMA-7B shapes, H100)."""
        t0 = time.perf_counter()
        result = self.bench_source(source, shapes=bench_shapes, dtypes=verify["dtypes"], compile_baseline=baselines,
                                   eager_baseline=baselines, label=verify["label"])
        if isinstance(result, Verdict):  # invalid, crashed or hung before any check ran
            return result, None
        verdict = _unverified(result, verify["label"], t0)
        fold_bench_checks(verdict, result)  # tampering, below the physical floor: rejected as after a verify
        if verdict.status is Status.FAIL:
            return verdict, None
        if result.rows:
            decision = screen(result.total())
            if not decision.keep:
                verdict.reason = f"not verified: {decision.reason} (only a candidate faster than the best is verified)"
                return verdict, result
        verdict = self.verify_source(source, **verify)
        if verdict.passed:
            fold_bench_checks(verdict, result)
        verdict.duration_s = round(time.perf_counter() - t0, 3)
        return verdict, (result if verdict.passed else None)


def fold_bench_checks(verdict: Verdict, result: BenchResult) -> None:
    """A benchmark that caught cheating (below the physical floor, tampering) rejects the verdict (a passed one, or
    one not verified yet)."""
    for check, state in result.checks.items():
        if state.startswith("fail"):
            verdict.hardening[check] = state
            if verdict.status in (Status.PASS, Status.UNVERIFIED):
                verdict.status = Status.FAIL
                verdict.reason = f"bench: {check}: {state.removeprefix('fail: ')}"
        elif check not in verdict.hardening or verdict.hardening[check] in ("not run", ""):
            verdict.hardening[check] = state


def _check_options(source: str, shape_sets: Sequence[str] | None, dtypes: Sequence[Any] | None) -> None:
    """Bad options are the caller's error (ValueError), found before any worker runs."""
    try:
        kf = kernelfile.parse(source)
    except kernelfile.KernelFileError:
        return  # the candidate's problem: reported as an INVALID verdict by _load
    from autokernel_ci.specs import get_spec

    spec = get_spec(kf.kernel_type)
    unknown = [s for s in shape_sets or () if s not in spec.shape_sets]
    if unknown:
        raise ValueError(f"{spec.name} has no shape set {unknown}; known: {', '.join(sorted(spec.shape_sets))}")
    if dtypes:
        from autokernel_ci.harness.stages import dtype_from_name

        missing = [d for d in dtypes if dtype_from_name(d) not in spec.tolerances]
        if missing:
            raise ValueError(f"{spec.name} does not run in {missing}; its dtypes: {list(spec.dtypes)}")


def _dtype_names(dtypes: Sequence[Any] | None) -> list[str] | None:
    if dtypes is None:
        return None
    return [str(d).removeprefix("torch.") for d in dtypes]


def _verdict(label: str, source: str, kf: kernelfile.KernelFile | None, device: str, status: Status, check: str,
             reason: str, t0: float) -> Verdict:
    """A verdict that stops before the stages. The hash is the source's own even when it does not parse (a contract
    error had the empty string's hash), so journal lines and reports tell two broken candidates apart."""
    f = CheckFailure(check=check, message=reason)
    stages = [StageResult(STAGES[0], status, reason=f"{check}: {reason}", failures=[f])]
    stages += [StageResult(n, Status.NOT_RUN, reason="not run") for n in STAGES[1:]]
    return Verdict(kernel=label, kernel_type=kf.kernel_type if kf else "", backend=kf.backend if kf else "",
                   source_hash=kernelfile.source_hash(source), device=device, status=status,
                   reason=f"{check}: {reason}", stages=stages,
                   hardening={"tampering": f"fail: {reason}"} if check == "tampering" else {},
                   duration_s=round(time.perf_counter() - t0, 3))


def _unverified(result: BenchResult, label: str, t0: float) -> Verdict:
    """The verdict of a candidate timed first: no stage ran (the benchmark names its file, type and hash)."""
    return Verdict(kernel=label, kernel_type=result.kernel_type, backend=result.backend,
                   source_hash=result.source_hash, device=result.device, status=Status.UNVERIFIED,
                   stages=[StageResult(n, Status.NOT_RUN, reason="not run: benchmarked first") for n in STAGES],
                   duration_s=round(time.perf_counter() - t0, 3))


# -- one-shot entry points --------------------------------------------------------------------------
def _read_kernel(kernel: str | Path) -> tuple[str, str]:
    path = Path(kernel)
    if not path.is_file():
        raise FileNotFoundError(f"kernel file {path} does not exist: pass the path of a kernel .py file")
    return path.read_text(), str(path)


def verify(kernel: str | Path, *, device: str | None = None, shape_sets: Sequence[str] | None = None,
           extra_shapes: Sequence[dict] = (), seed: int | None = None, timeout_s: float | None = None,
           dtypes: Sequence[Any] | None = None) -> Verdict:
    """Five-stage verification of one kernel file in a fresh sandboxed worker."""
    source, label = _read_kernel(kernel)
    with Evaluator(device, timeout_s=timeout_s or DEFAULT_TIMEOUT_S) as ev:
        return ev.verify_source(source, shape_sets=shape_sets, extra_shapes=extra_shapes, seed=seed, dtypes=dtypes,
                                label=label)


def bench(kernel: str | Path, *, device: str | None = None, shapes: Sequence[dict] | None = None,
          dtypes: Sequence[Any] | None = None, compile_baseline: bool = True,
          timeout_s: float | None = None) -> BenchResult:
    """Benchmark one kernel file against eager and torch.compile in a fresh sandboxed worker.
    Raises RuntimeError (with the verdict's reason) if the kernel cannot even run."""
    source, label = _read_kernel(kernel)
    with Evaluator(device, timeout_s=timeout_s or max(DEFAULT_TIMEOUT_S, 600.0)) as ev:
        result = ev.bench_source(source, shapes=shapes, dtypes=dtypes, compile_baseline=compile_baseline, label=label)
    if isinstance(result, Verdict):
        raise BenchFailed(result)
    return result


class BenchFailed(RuntimeError):
    def __init__(self, verdict: Verdict) -> None:
        super().__init__(f"cannot benchmark {verdict.kernel}: {verdict.status}: {verdict.reason}")
        self.verdict = verdict
