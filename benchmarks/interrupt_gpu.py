"""How fast `autokernel-ci optimize` stops on Ctrl-C / SIGTERM mid-experiment, and what it leaves behind.

Profiles the bundled LLaMA-style example, starts the loop on it, signals it once the journal holds
`--after` records, and records (JSON) the seconds from the signal to exit, the exit code, the processes
below the loop still alive 5 s later, the GPU's compute processes (nvidia-smi) and whether `--resume`
continues the numbering. A measurement script, not a test (tests/loop/test_loop_interrupt.py is the test).

    python3 benchmarks/interrupt_gpu.py --device cuda --out OUT
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the /proc process-tree walk the interrupt tests use
from signal_helpers import alive, descendants  # noqa: E402

MODEL = f'{REPO}/examples/models/llama.py:build_model(size="tiny")'
INPUTS = f'{REPO}/examples/models/llama.py:example_inputs(size="tiny")'


def gpu_compute_pids() -> list[str]:
    if not shutil.which("nvidia-smi"):
        return []
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"], capture_output=True,
                         text=True, check=False).stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


def journal_lines(run: Path) -> int:
    path = run / "journal.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def optimize(plan: Path, run: Path, device: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "autokernel_ci", "optimize", "--plan", str(plan), "--run-dir", str(run),
            "--device", device, "--budget-minutes", "30", *extra]


def one_round(plan: Path, run: Path, device: str, sig: signal.Signals, after: int) -> dict:
    proc = subprocess.Popen(optimize(plan, run, device, "--max-experiments", "500"), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.time() + 240
    while journal_lines(run) < after:
        if proc.poll() is not None or time.time() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            return {"signal": sig.name, "error": f"no progress: {proc.stderr.read()[-1500:]}"}
        time.sleep(0.05)
    time.sleep(0.5)  # inside the next experiment
    below = descendants(proc.pid)
    gpu_before = gpu_compute_pids()
    t0 = time.perf_counter()
    os.killpg(proc.pid, sig) if sig == signal.SIGINT else os.kill(proc.pid, sig)
    _, err = proc.communicate(timeout=120)
    stop_s = time.perf_counter() - t0
    time.sleep(5.0)
    records = [json.loads(line) for line in (run / "journal.jsonl").read_text().splitlines()]
    summary = json.loads((run / "summary.json").read_text())
    last_n = max(r["n"] for r in records)
    resume = subprocess.run(optimize(plan, run, device, "--max-experiments", str(last_n + 1), "--resume"),
                            capture_output=True, text=True, timeout=600, check=False)
    resumed = [json.loads(line) for line in (run / "journal.jsonl").read_text().splitlines()]
    return {"signal": sig.name, "exit_code": proc.returncode, "stop_s": round(stop_s, 3),
            "processes_below_before": len(below), "left_running": sorted(p for p in below if alive(p)),
            "gpu_compute_pids_before": gpu_before, "gpu_compute_pids_after": gpu_compute_pids(),
            "journal_records": len(records), "crash_records": sum(r["status"] == "crash" for r in records),
            "stopped": summary["stopped"], "finished": summary["finished"],
            "message": err.strip().splitlines()[-1] if err.strip() else "",
            "resume_exit_code": resume.returncode,
            "resume_appended_n": [r["n"] for r in resumed[len(records):]],
            "resume_kept_earlier_records": resumed[:len(records)] == records}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--after", type=int, default=5, help="journal records before the signal")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    plan = args.out / "plan.json"
    subprocess.run([sys.executable, "-m", "autokernel_ci", "profile", "--model", MODEL, "--inputs", INPUTS,
                    "--device", args.device, "--dtype", "fp32" if args.device == "cpu" else "bf16", "--top", "3",
                    "--json", str(plan)], check=True, stdout=subprocess.DEVNULL)
    rounds = [one_round(plan, args.out / f"run_{sig.name}", args.device, sig, args.after)
              for sig in (signal.SIGINT, signal.SIGTERM)]
    result = {"device": args.device, "gpu": subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True,
                                                           check=False).stdout.strip() if args.device == "cuda"
              else "cpu", "rounds": rounds}
    (args.out / "interrupt.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
