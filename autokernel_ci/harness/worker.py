"""The sandboxed worker: imports torch and triton once, then verifies and benchmarks candidates
sent by an Evaluator (python -m autokernel_ci.harness.worker, never run by hand).

Per candidate: `load` imports the file under the tamper guard and answers; only then does the
Evaluator send `verify` with the input seed, so import-time code cannot know it. `verify` runs the
five stage tests through pytest in this process (plugin.py) and answers with the verdict.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

STAGE_TEST_FILE = "test_autokernel_stages.py"
PYTEST_INI = "[pytest]\naddopts =\n"


class _Provided:
    """Hands the loaded candidate's VerifyRun to the plugin's `autokernel_run` fixture."""

    def __init__(self, run) -> None:
        self.autokernel_provided_run = run


def _prepare_dir(workdir: Path) -> None:
    (workdir / STAGE_TEST_FILE).write_text("from autokernel_ci.harness.stage_tests import *  # noqa: F401,F403\n")
    (workdir / "pytest.ini").write_text(PYTEST_INI)


def _run_pytest(run, workdir: Path) -> int:
    import pytest

    args = [str(workdir / STAGE_TEST_FILE), "-q", "-p", "no:cacheprovider", "-p", "autokernel_ci.harness.plugin",
            "--rootdir", str(workdir), "-c", str(workdir / "pytest.ini"), "--no-header", "-rN", "--assert=plain"]
    provided = _Provided(run)
    try:
        return int(pytest.main(args, plugins=[provided]))
    finally:
        provided.autokernel_provided_run = None  # pytest keeps its plugins reachable after main() returns


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="autokernel_ci.harness.worker")
    parser.add_argument("--fd-in", type=int, required=True)
    parser.add_argument("--fd-out", type=int, required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--parent-pid", type=int, default=None)
    args = parser.parse_args(argv)
    from autokernel_ci.harness import sandbox

    if args.parent_pid is not None:
        sandbox.die_with_parent(args.parent_pid)
    if args.device == "cpu":
        sandbox.apply_cpu_limits()
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # only our plugin, whatever the user installed
    t0 = time.perf_counter()
    import torch
    import triton  # noqa: F401

    from autokernel_ci.harness import loader
    from autokernel_ci.harness.protocol import Channel, ChannelClosed

    if args.device == "cuda":
        torch.cuda.init()
    workdir = Path(args.workdir)
    _prepare_dir(workdir)
    channel = Channel(args.fd_in, args.fd_out)
    channel.send({"op": "ready", "pid": os.getpid(), "import_s": round(time.perf_counter() - t0, 3),
                  "torch": torch.__version__})
    candidate = None
    while True:
        try:
            msg = channel.recv()
        except ChannelClosed:
            return 0
        op, rid = msg.get("op"), msg.get("id")
        reply: dict = {"id": rid}
        if op == "shutdown":
            channel.send(reply)
            return 0
        if op == "load":
            if candidate is not None:
                loader.unload(candidate)
                candidate = None
            loaded = loader.load_candidate(msg["path"], device=args.device)
            if isinstance(loaded, loader.LoadFailure):
                reply.update(ok=False, status=loaded.status.value, check=loaded.check, reason=loaded.reason,
                             dirty=loaded.check == "tampering")
            else:
                candidate = loaded
                reply.update(ok=True, kernel_names=list(loaded.kernel_names))
        elif op == "verify" and candidate is not None:
            reply.update(_verify(candidate, msg, args.device, workdir))
        elif op == "bench" and candidate is not None:
            try:
                reply.update(_bench(candidate, msg, args.device))
            except Exception as exc:  # noqa: BLE001 - a candidate failing under benchmark is a verdict
                from autokernel_ci.harness import faults

                status = faults.classify(exc)
                poisoned = status.value == "oom" or faults.poisons_cuda_context(exc)
                reply.update(error=faults.describe(exc), status=status.value, dirty=args.device == "cuda" and poisoned)
        else:
            reply.update(error=f"unknown op {op!r} or no candidate loaded")
        sys.stdout.flush()
        channel.send(reply)


def _verify(candidate, msg: dict, device: str, workdir: Path) -> dict:
    """In its own frame, so the run (which holds the seed) is garbage once the reply is built."""
    from autokernel_ci.harness.protocol import PROGRESS_FILE
    from autokernel_ci.harness.stages import VerifyRun

    seed = int(msg.pop("seed"))
    progress_path = workdir / PROGRESS_FILE
    progress_path.write_text("starting the verification")
    run = VerifyRun(candidate, device=device, shape_sets=msg.get("shape_sets"),
                    extra_shapes=msg.get("extra_shapes") or (), dtypes=msg.get("dtypes"),
                    seed_source=lambda: seed, progress=progress_path.write_text)
    _run_pytest(run, workdir)
    for name in ("last_type", "last_value", "last_traceback"):  # pytest leaves failing frames here
        if hasattr(sys, name):
            delattr(sys, name)
    return {"verdict": run.verdict(msg.get("label")).to_dict(), "dirty": run.dirty}


def _bench(candidate, msg: dict, device: str) -> dict:
    from autokernel_ci.harness import benchmark, guard

    result = benchmark.bench_candidate(candidate, device=device, shapes=msg.get("shapes"),
                                               dtypes=msg.get("dtypes"), compile_baseline=msg.get("compile", True),
                                               eager_baseline=msg.get("eager", True), seed=int(msg.get("seed", 0)),
                                               label=msg.get("label"))
    changes = guard.find_tampering(candidate.snapshot)
    if changes:
        result.checks["tampering"] = "fail: tampering: " + "; ".join(changes)
    return {"bench": result.to_dict(), "dirty": bool(changes)}


if __name__ == "__main__":
    sys.exit(main())
