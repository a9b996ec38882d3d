"""The GPU benchmark scripts' own logic, run on the CPU (their --device cpu smoke mode through the Triton
interpreter, tiny shapes): what they record, not how fast anything is."""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path

import pytest
import torch

from autokernel_ci.hardware.specs import load_spec
from autokernel_ci.specs import get_spec

REPO = Path(__file__).resolve().parents[2]


def _script(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("repeats", [1, 3])
def test_check_starters_times_in_turn_and_records_the_rounds_spread(tmp_path, repeats):
    cs = _script("check_starters_gpu")
    rc = cs.main(["--device", "cpu", "--sets", "cpu", "--time-set", "cpu", "--no-compile", "--skip-check",
                  "--types", "softmax", "--backends", "triton", "--repeats", str(repeats), "--out", str(tmp_path)])
    assert rc == 0
    data = json.loads((tmp_path / "check_starters.json").read_text())
    assert data["repeats"] == repeats
    timings = data["reports"][0]["timings"]
    assert len(timings) == 2 and all(t["ours_us"] > 0 and t["eager_us"] > 0 for t in timings)
    markdown = (tmp_path / "check_starters.md").read_text()
    for t in timings:
        if repeats == 1:
            assert t["eager_ratio_range"] is None
        else:
            low, high = t["eager_ratio_range"]
            assert 0 < low <= high and f"({low:.2f}-{high:.2f})" in markdown
    assert ("timed in turn 3 times" in markdown) == (repeats == 3)


def test_variants_point_runs_on_another_kernel_file(tmp_path, monkeypatch):
    """A point's "_file" runs that kernel file (here the starter with a CONFIG the starter does not have, so the row
    shows which file ran: its recorded config is the point's, and it was checked and timed like the others)."""
    vg = _script("variants_gpu")
    source = (REPO / "kernels" / "triton" / "softmax.py").read_text()
    other = tmp_path / "softmax_other.py"
    other.write_text(source + "\nMARKER_FROM_OTHER_FILE = True\n")
    variants = tmp_path / "points.json"
    variants.write_text(json.dumps([{}, {vg.FILE_KEY: str(other.relative_to(tmp_path))}]))
    monkeypatch.setattr(vg, "REPO", tmp_path)
    loaded = []
    real_import = vg._import
    monkeypatch.setattr(vg, "_import", lambda path: loaded.append(real_import(path)) or loaded[-1])
    out = tmp_path / "out"
    assert vg.main(["softmax", "--variants", str(variants), "--sets", "cpu", "--time-set", "cpu", "--out",
                    str(out)]) == 0
    rows = json.loads((out / "variants_softmax.json").read_text())["rows"]
    assert [r["config"] for r in rows] == [{}, {vg.FILE_KEY: "softmax_other.py"}]
    assert all(not r.get("error") and r["checks"].endswith("/2") and r["times"] for r in rows), rows
    assert [hasattr(m, "MARKER_FROM_OTHER_FILE") for m in loaded] == [False, True]


def test_variants_point_with_a_missing_file_is_recorded_and_the_run_goes_on(tmp_path):
    vg = _script("variants_gpu")
    variants = tmp_path / "points.json"
    variants.write_text(json.dumps([{vg.FILE_KEY: "no/such/file.py"}, {}]))
    out = tmp_path / "out"
    assert vg.main(["softmax", "--variants", str(variants), "--sets", "cpu", "--time-set", "cpu", "--out",
                    str(out)]) == 0
    rows = json.loads((out / "variants_softmax.json").read_text())["rows"]
    assert "file.py" in rows[0]["error"] and not rows[1].get("error")


def test_check_starters_refuses_zero_repeats_with_the_fix(capsys):
    cs = _script("check_starters_gpu")
    with pytest.raises(SystemExit):
        cs.parse_args(["--repeats", "0"])
    assert "--repeats 0: at least 1 round" in capsys.readouterr().err


@pytest.mark.parametrize(("gpu", "spec_key", "given", "expect"), [
    ("NVIDIA H200", "h200", {}, (4269.0, 690.0, "gpu_specs/h200.yaml")),  # cuBLAS at the model shapes
    ("NVIDIA H100 80GB HBM3", "h100-sxm", {}, (3000.0, 798.0, "gpu_specs/h100-sxm.yaml")),  # its large GEMM
    ("NVIDIA L4", "l4", {}, (2924.4, 798.0, "measured on this NVIDIA L4")),  # an entry without `measured:`
    ("Some GPU", None, {}, (2924.4, 798.0, "measured on this Some GPU")),  # no entry at all
    ("Some GPU", None, {"copy_gbps": 3000.0}, (3000.0, 798.0, "measured on this")),
    ("Some GPU", None, {"copy_gbps": 3000.0, "peak_tflops": 700.0}, (3000.0, 700.0, "command line")),
])
def test_check_starters_ceilings_come_from_the_gpus_own_entry_or_a_measurement(gpu, spec_key, given, expect):
    cs = _script("check_starters_gpu")
    args = cs.parse_args([f"--{k.replace('_', '-')}={v}" for k, v in given.items()])
    spec = load_spec(spec_key) if spec_key else None
    measured = []

    def fake_calibrate(index):  # hardware.calibrate's answer on an H100 (ninth session)
        measured.append(index)
        return types.SimpleNamespace(copy_gbs=2924.4, gemm_tflops=798.0, gemm_shape=(8192, 8192, 8192))

    source = cs.resolve_ceilings(args, spec, gpu, measure=fake_calibrate)
    assert (args.copy_gbps, args.peak_tflops) == expect[:2] and expect[2] in source
    assert measured == ([0] if "measured on this" in expect[2] else [])


def test_sustained_clock_refuses_empty_runs_and_counts_cycles(capsys, tmp_path):
    sc = _script("sustained_clock")
    assert sc.main(["matmul", "--rounds", "0", "--out", str(tmp_path)]) == 2
    assert "--rounds 0" in capsys.readouterr().err
    run = sc.Run("cuda", 0, calls=100, us_per_call=548.0, sm_mhz=1500.0, power_w=700.0, temp_c=60.0, samples=30)
    assert run.mcycles_per_call == pytest.approx(0.822)  # 548 us x 1.5 GHz
    poller = sc.Poller()
    poller.samples = [(1.0, 1980.0, 300.0, 40.0), (2.0, 1500.0, 700.0, 60.0), (3.0, 1600.0, 690.0, 61.0)]
    assert [s[1] for s in poller.window(1.5, 3.0)] == [1500.0, 1600.0]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is there: the script would run")
def test_read_ceiling_refuses_a_machine_without_a_gpu(capsys, tmp_path):
    rc = _script("read_ceiling_gpu")
    with pytest.raises(SystemExit) as exc:
        rc.main(["--out", str(tmp_path)])
    assert exc.value.code == 2 and "needs a CUDA GPU" in capsys.readouterr().err


def test_read_ceiling_flushes_run_and_only_the_dirty_one_writes():
    """Both flushes are called thousands of times a run: a wrong torch call there (the first GPU run's sum with out=
    but no dim) fails only after the whole set-up."""
    rc = _script("read_ceiling_gpu")
    flushes = rc.make_flushes(4096, torch.device("cpu"))
    assert set(flushes) == {"dirty", "clean"}
    buf = flushes["dirty"]()
    assert buf.numel() == 1024 and not buf.any()
    buf.fill_(3)
    total = flushes["clean"]()
    assert total.dtype == torch.int64 and int(total) == 3 * 1024 and int(buf.sum()) == 3 * 1024


@pytest.mark.skipif(__import__("shutil").which("nvcc") is None, reason="nvcc not installed")
def test_read_ceiling_stream_kernel_builds_at_every_point():
    from autokernel_ci import nvrtc

    rc = _script("read_ceiling_gpu")
    for threads, unroll in rc.STREAM_POINTS:
        assert 2048 % threads == 0, "2048 threads an SM come in whole blocks"
        built = nvrtc.compile_check(rc.STREAM_SOURCE, "sm_90", defines={"THREADS": threads, "UNROLL": unroll})
        assert built.kernels == ("read_stream",)


def test_repeat_records_every_round_with_its_inputs(tmp_path):
    rp = _script("repeat_gpu")
    assert rp.main(["rmsnorm", "--backend", "triton", "--time-set", "cpu", "--times", "3", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "repeat_triton_rmsnorm.json").read_text())
    assert data["type"] == "rmsnorm" and data["shape"] == get_spec("rmsnorm").shapes("cpu")[0]
    assert [r["round"] for r in data["rows"]] == [0, 1, 2]
    assert all(r["ours_us"] > 0 and r["eager_us"] > 0 and len(r["ptrs"]) == 2 for r in data["rows"])


def test_search_agent_table_counts_verified_experiments_and_unconfirmed_keeps(tmp_path):
    counts = _script("search_agent_gpu").journal_counts
    passed, untouched = {"smoke": "pass"}, {"smoke": "not_run"}
    records = [
        {"n": 0, "status": "kept", "stages": passed},  # the starter: a baseline, not an experiment
        {"n": 1, "status": "reverted", "stages": untouched},  # timed first, slower: never verified
        {"n": 2, "status": "reverted", "stages": passed, "confirm": {"confirmed": False, "reason": "slower"}},
        {"n": 3, "status": "kept", "stages": passed, "confirm": {"confirmed": True, "reason": "won 2 of 2"}},
        {"n": 4, "status": "rejected", "stages": {"smoke": "fail"}},
    ]
    (tmp_path / "journal.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert counts(tmp_path) == {"verified": 3, "not_confirmed": 1}
    assert counts(tmp_path / "no-run") == {"verified": 0, "not_confirmed": 0}
