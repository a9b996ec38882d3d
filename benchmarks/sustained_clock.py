"""Time a kernel type's starters and eager under sustained load with the SM clock and board power beside them (GPU;
not a test).

Nsight Compute times one launch of a cool GPU; a benchmark's median comes from seconds of back-to-back launches,
where a GEMM holds the board at its power limit and the clock falls to whatever that power buys. Two kernels of the
same cycles a call then differ in time when one costs more energy a call. Each implementation runs back to back for
--seconds (after --warm seconds), in turn, --rounds times; nvidia-smi is polled meanwhile. The record per run: time a
call (CUDA events over the measured window), mean SM clock and power over the window, and cycles a call (time x
clock): equal cycles with unequal times point at the clock (energy), unequal cycles at the kernel itself.

    python benchmarks/sustained_clock.py matmul --index 1 --backends triton,cuda --out /tmp/clock
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ncu_kernels import add_target_args, target_inputs  # noqa: E402

from autokernel_ci.harness import baselines, loader  # noqa: E402
from autokernel_ci.paths import starter_kernel  # noqa: E402

QUERY = ["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu", "--format=csv,noheader,nounits"]
AHEAD = 20  # calls the host may run ahead of the GPU (~10 ms of GEMMs): the queue never drains, memory stays flat


@dataclass
class Run:
    label: str
    round: int
    calls: int
    us_per_call: float
    sm_mhz: float
    power_w: float
    temp_c: float
    samples: int

    @property
    def mcycles_per_call(self) -> float:
        return self.us_per_call * self.sm_mhz / 1e6  # us x MHz = cycles


class Poller(threading.Thread):
    """nvidia-smi in a loop: (host time, SM MHz, W, C) samples until stopped (each query takes ~30-50 ms)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.samples: list[tuple[float, float, float, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            out = subprocess.run(QUERY, capture_output=True, text=True, check=False).stdout.strip().splitlines()
            if out:
                clock, power, temp = (float(v) for v in out[0].split(","))
                self.samples.append((time.time(), clock, power, temp))

    def window(self, t0: float, t1: float) -> list[tuple[float, float, float, float]]:
        return [s for s in self.samples if t0 <= s[0] <= t1]


def sustain(fn, label: str, rnd: int, warm_s: float, seconds: float, poller: Poller) -> Run:
    events: list[torch.cuda.Event] = []

    def launch() -> None:
        fn()
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        events.append(ev)
        if len(events) > AHEAD:
            events[-AHEAD - 1].synchronize()

    end_warm = time.time() + warm_s
    while time.time() < end_warm:
        launch()
    first = len(events) - 1  # the measured window starts at the last warm-up call's end
    t0 = time.time()
    while time.time() < t0 + seconds:
        launch()
    torch.cuda.synchronize()
    t1 = time.time()
    calls = len(events) - 1 - first
    us = events[first].elapsed_time(events[-1]) * 1e3 / calls
    window = poller.window(t0, t1) or poller.samples[-1:]
    return Run(label, rnd, calls, us, statistics.fmean(s[1] for s in window), statistics.fmean(s[2] for s in window),
               statistics.fmean(s[3] for s in window), len(window))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_target_args(ap)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--warm", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.seconds <= 0:
        print(f"--rounds {args.rounds} / --seconds {args.seconds}: both must be positive (e.g. --rounds 2 --seconds 3)",
              file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("sustained_clock.py needs a CUDA GPU", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    spec, shape, inputs = target_inputs(args, device)
    calls = {"eager": lambda: baselines.eager(spec)(*inputs)}
    for backend in args.backends.split(","):
        cand = loader.load_candidate(starter_kernel(args.kernel_type, backend), device=str(device))
        if isinstance(cand, loader.LoadFailure):
            print(f"{backend}: the starter did not load: {cand}", file=sys.stderr)
            return 1
        calls[backend] = lambda c=cand: c.fn(*inputs)
    poller = Poller()
    poller.start()
    runs = [sustain(fn, label, rnd, args.warm, args.seconds, poller)
            for rnd in range(args.rounds) for label, fn in calls.items()]
    poller.stop.set()
    args.out.mkdir(parents=True, exist_ok=True)
    title = f"{args.kernel_type} {spec.describe_shape(shape)} {args.dtype}, {torch.cuda.get_device_name()}"
    (args.out / f"sustained_{args.kernel_type}.json").write_text(json.dumps(
        {"title": title, "runs": [{**asdict(r), "mcycles_per_call": r.mcycles_per_call} for r in runs]}, indent=1))
    print(title)
    print(f"{'impl':<8} {'round':>5} {'calls':>6} {'us/call':>9} {'SM MHz':>7} {'W':>6} {'C':>4} {'Mcycles':>8}")
    for r in runs:
        print(f"{r.label:<8} {r.round:>5} {r.calls:>6} {r.us_per_call:>9.1f} {r.sm_mhz:>7.0f} {r.power_w:>6.0f} "
              f"{r.temp_c:>4.0f} {r.mcycles_per_call:>8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
