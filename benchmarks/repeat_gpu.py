"""Time one starter many times in one process, with new inputs every round: is a kernel's time steady?

python benchmarks/repeat_gpu.py rmsnorm --backend cuda --times 10 --out OUT

Each round allocates new inputs, then times ours and eager (do_bench medians; on a machine without a GPU the Triton
starters run through the interpreter as a smoke test, and the numbers mean nothing). A variant run that times the
same point 50 us once and 65 us later is told from a kernel that is itself unsteady this way.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_starters_gpu import DTYPES, _bench, _import  # noqa: E402

from autokernel_ci.paths import starter_kernel  # noqa: E402
from autokernel_ci.specs import get_spec  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kernel_type")
    ap.add_argument("--backend", default="cuda", choices=("triton", "cuda"))
    ap.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    ap.add_argument("--time-set", default="llama7b")
    ap.add_argument("--times", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=25, help="do_bench warmup, ms")
    ap.add_argument("--rep", type=int, default=100, help="do_bench repetition time, ms")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    spec = get_spec(args.kernel_type)
    module = _import(starter_kernel(args.kernel_type, args.backend))
    shape = spec.shapes(args.time_set)[0]
    gen = torch.Generator(device=device).manual_seed(0)
    rows = []
    for i in range(args.times):
        inputs = spec.make_inputs(shape, DTYPES[args.dtype], device, gen)
        ours = _bench(lambda inputs=inputs: module.kernel_fn(*inputs), args.warmup, args.rep)
        eager = _bench(lambda inputs=inputs: spec.eager_fn()(*inputs), args.warmup, args.rep)
        ptrs = [hex(t.data_ptr()) for t in inputs if isinstance(t, torch.Tensor)]
        rows.append({"round": i, "ours_us": round(ours, 2), "eager_us": round(eager, 2), "ptrs": ptrs})
        print(f"[{i}] ours {ours:8.2f} us  eager {eager:8.2f} us  {' '.join(ptrs)}", flush=True)
    gpu = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    record = {"gpu": gpu, "torch": torch.__version__, "type": args.kernel_type, "backend": args.backend,
              "dtype": args.dtype, "shape": shape, "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"repeat_{args.backend}_{args.kernel_type}.json").write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
