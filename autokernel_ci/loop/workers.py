"""Evaluation workers: one per visible GPU (or N CPU workers), each a process holding one Evaluator.

The orchestrator keeps up to one experiment in flight per worker, always on different ops. Two
workers that share a device (more workers than GPUs, or two shards' jobs on one runner with a
shared AUTOKERNEL_LOCK_DIR) serialise through a per-device lock file (fcntl.flock) held around
each evaluation, so no timing is ever taken while another of our workers uses that GPU. A worker
process that dies is reported as a crash of its experiment and replaced.
"""

from __future__ import annotations

import fcntl
import importlib
import logging
import multiprocessing as mp
import os
import re
import signal
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from types import FrameType
from typing import Any

log = logging.getLogger(__name__)

ENV_LOCK_DIR = "AUTOKERNEL_LOCK_DIR"
# A SIGTERM'd worker usually cleans up (kills its candidate, removes its temp dir) in ~0.1 s; under load on 2
# cores one was seen still in its select() 10 s later (Python runs handlers in the main thread only, once
# its blocking call returns). After this grace, SIGKILL; its candidate dies with it (die_with_parent).
ABORT_GRACE_S = 2.0
# Candidate code never sees these; the harness scrubs its children too, this is the second wall.
SECRET_ENV = re.compile(r"(API_KEY|_TOKEN|_SECRET|ACCESS_KEY|PASSWORD)$")


@dataclass(frozen=True)
class Slot:
    """Where a worker runs: device 'cuda' or 'cpu', the GPU index, and the lock id it serialises on."""

    device: str
    gpu_index: int | None
    lock_id: str  # e.g. "cuda0"; workers with the same lock_id never time at once
    index: int = 0  # the worker's number in the pool

    @property
    def label(self) -> str:
        return f"{self.lock_id}#{self.index}"


def visible_gpu_count() -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 - no usable torch.cuda means no GPU
        return 0


def plan_slots(device: str, workers: int | None = None, devices: list[int] | None = None) -> list[Slot]:
    """One slot per visible GPU by default; `workers` beyond that share GPUs round-robin (and their locks).
    On cpu, `devices` names the pretend device ids the workers lock on (default: one each)."""
    if device == "cpu":
        ids = devices if devices is not None else list(range(workers or 1))
        n = workers or len(ids)
        return [Slot("cpu", None, f"cpu{ids[i % len(ids)]}", i) for i in range(n)]
    gpus = devices if devices is not None else list(range(visible_gpu_count()))
    if not gpus:
        raise RuntimeError("--device cuda but no GPU is visible (CUDA_VISIBLE_DEVICES / torch.cuda.device_count() "
                           "is 0): run on a GPU runner or pass --device cpu")
    n = workers or len(gpus)
    return [Slot("cuda", gpus[i % len(gpus)], f"cuda{gpus[i % len(gpus)]}", i) for i in range(n)]


@contextmanager
def device_lock(lock_dir: Path, lock_id: str) -> Iterator[None]:
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / f"{lock_id}.lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def import_ref(ref: str) -> Any:
    module, _, name = ref.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise RuntimeError(f"cannot load {ref!r} ({exc}): the harness must export it "
                           "(docs/internal-api.md)") from exc


def _ignore_sigint(signum: int, frame: FrameType | None) -> None:
    """The parent decides what a Ctrl-C stops (a terminal sends it to the whole group). A handler, not
    SIG_IGN: an ignored SIGINT would be inherited through exec by the harness's children."""


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds through the finally below, which kills the harness's worker


def _worker_main(conn: Connection, slot: Slot, lock_dir: str, evaluator_ref: str, timeout_s: float) -> None:
    signal.signal(signal.SIGINT, _ignore_sigint)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    for key in [k for k in os.environ if SECRET_ENV.search(k)]:
        del os.environ[key]
    try:
        evaluator = import_ref(evaluator_ref)(slot.device, timeout_s=timeout_s, gpu_index=slot.gpu_index)
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which stops with the message
        conn.send(("fatal", None, f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", None, None))
    try:
        _serve(conn, slot, lock_dir, evaluator)
    except BaseException:
        # The harness runs candidates in their own session, out of reach of the parent's signals: a worker
        # ended mid-experiment (SIGTERM from an interrupted loop) must kill that session, or a hung kernel
        # would keep the GPU after the run is gone.
        abort = getattr(evaluator, "abort", None)
        if abort is not None:
            abort()
        raise


def _serve(conn: Connection, slot: Slot, lock_dir: str, evaluator: Any) -> None:
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message is None:
            close = getattr(evaluator, "close", None)
            if close is not None:
                close()
            return
        task_id, source, kwargs = message
        with device_lock(Path(lock_dir), slot.lock_id):
            start = time.time()
            try:
                verdict, bench = evaluator.evaluate(source, **kwargs)
                payload: dict[str, Any] = {"verdict": verdict.to_dict(),
                                           "bench": bench.to_dict() if bench is not None else None}
            except Exception as exc:  # noqa: BLE001 - a harness error is this experiment's crash
                payload = {"error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"}
            payload["window"] = [start, time.time()]
        payload["slot"] = slot.label
        conn.send(("done", task_id, payload))


@dataclass
class _Worker:
    slot: Slot
    process: Any
    conn: Connection
    task: Any = None
    started: float = 0.0


@dataclass
class Done:
    task: Any
    payload: dict[str, Any] = field(default_factory=dict)


class WorkerPool:
    """Worker processes, one per slot; `submit` to a free one, `wait` for finished tasks."""

    def __init__(self, slots: list[Slot], *, lock_dir: Path, evaluator_ref: str, timeout_s: float):
        self.slots = slots
        self.lock_dir = Path(os.environ.get(ENV_LOCK_DIR) or lock_dir)
        self.evaluator_ref = evaluator_ref
        self.timeout_s = timeout_s
        # spawn: fork after torch/CUDA init is unsafe. Not daemonic: the harness starts its own children.
        self._ctx = mp.get_context("spawn")
        self.workers = [self._start(slot) for slot in slots]
        self.replaced = 0

    def _start(self, slot: Slot) -> _Worker:
        parent, child = self._ctx.Pipe()
        process = self._ctx.Process(target=_worker_main, name=f"autokernel-worker-{slot.label}", daemon=False,
                                    args=(child, slot, str(self.lock_dir), self.evaluator_ref, self.timeout_s))
        process.start()
        child.close()
        return _Worker(slot, process, parent)

    def _await_ready(self, worker: _Worker) -> None:
        try:
            kind, _, detail = worker.conn.recv()
        except EOFError:
            raise RuntimeError(f"evaluation worker {worker.slot.label} exited at start "
                               f"(exit code {worker.process.exitcode})") from None
        if kind == "fatal":
            raise RuntimeError(f"evaluation worker {worker.slot.label} could not start: {detail}")

    def start(self) -> None:
        for worker in self.workers:
            self._await_ready(worker)

    def free(self) -> list[_Worker]:
        return [w for w in self.workers if w.task is None]

    def busy(self) -> int:
        return sum(1 for w in self.workers if w.task is not None)

    def submit(self, worker: _Worker, task: Any, source: str, kwargs: dict[str, Any]) -> None:
        worker.task, worker.started = task, time.time()
        worker.conn.send((id(task), source, kwargs))

    def wait(self, timeout: float | None = None, *, wake: Any = None) -> list[Done]:
        """Finished tasks, after at most `timeout` s; `wake` (anything with a fileno) readable returns early."""
        busy = [w for w in self.workers if w.task is not None]
        if not busy:
            return []
        extra = [wake] if wake is not None and wake.fileno() >= 0 else []
        ready = wait([w.conn for w in busy] + [w.process.sentinel for w in busy] + extra, timeout)
        finished: list[Done] = []
        for worker in busy:
            if worker.conn in ready:
                try:
                    kind, _, payload = worker.conn.recv()
                except (EOFError, OSError):
                    kind, payload = "died", None
                if kind == "done":
                    finished.append(Done(worker.task, payload))
                    worker.task = None
                    continue
            if worker.process.sentinel in ready or not worker.process.is_alive():
                finished.append(Done(worker.task, self._replace(worker)))
        return finished

    def _replace(self, worker: _Worker) -> dict[str, Any]:
        worker.process.join(timeout=5)
        code = worker.process.exitcode
        log.warning("evaluation worker %s died (exit code %s) during an experiment; starting a new one",
                    worker.slot.label, code)
        fresh = self._start(worker.slot)
        self._await_ready(fresh)
        self.workers[self.workers.index(worker)] = fresh
        self.replaced += 1
        return {"error": f"evaluation worker died (exit code {code}); it was replaced",
                "window": [worker.started, time.time()], "slot": worker.slot.label, "died": True}

    def close(self, *, abort: bool = False) -> None:
        """Stop the workers. abort: a busy worker gets SIGTERM at once (its experiment is dropped) instead
        of finishing it, and SIGKILL after ABORT_GRACE_S, so an interrupted loop exits inside GitHub's 7.5 s
        before SIGTERM. Its candidate process dies with it (sandbox.die_with_parent)."""
        for worker in self.workers:
            if abort and worker.task is not None and worker.process.is_alive():
                worker.process.terminate()
                continue
            try:
                worker.conn.send(None)
            except (OSError, BrokenPipeError):
                pass
        for worker in self.workers:
            worker.process.join(timeout=ABORT_GRACE_S if abort else 10)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join()
