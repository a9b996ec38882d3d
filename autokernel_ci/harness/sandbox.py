"""The worker process's sandbox: scrubbed environment, own process group, memory limit, kill.

The child sees only variables on an allowlist (toolchain, GPU selection, caches), and even those
are dropped when their name looks like a secret. Candidates never see a GitHub token or an LLM key.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

# Names (exact) and prefixes a worker may inherit: what Python, torch, Triton, CUDA and the
# compilers need to run, and nothing about the repository, CI or the user's accounts.
KEEP_NAMES = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TERM", "TZ", "TMPDIR", "TEMP", "TMP",
    "LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH", "CC", "CXX", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS", "XDG_CACHE_HOME", "LITELLM_LOCAL_MODEL_COST_MAP", "CONDA_PREFIX", "VIRTUAL_ENV",
    "PYTORCH_CUDA_ALLOC_CONF", "AUTOKERNEL_GPU_SPECS_DIR",
    "KINETO_LOG_LEVEL",  # a profiler log level the user set reaches the workers' profiles (torch_profile)
})
KEEP_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "TRITON_", "PYTHON", "TORCH", "TORCHINDUCTOR_", "HIP_", "ROCM_", "HSA_",
                 "NCCL_", "CUDNN_", "CUBLAS_", "NVCC_")
# Dropped even when allowlisted: anything that names a credential.
SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY|CREDENTIAL|PRIVATE|AUTH|SESSION)",
                         re.IGNORECASE)
SECRET_PREFIXES = ("GITHUB_", "GH_", "ACTIONS_", "RUNNER_", "AWS_", "AZURE_", "GOOGLE_", "GCP_", "OPENAI_",
                   "ANTHROPIC_", "HF_", "HUGGING", "LITELLM_API", "COHERE_", "MISTRAL_", "GROQ_", "DEEPSEEK_")

# CPU workers get an address-space limit (a runaway allocation becomes an OOM verdict, not a
# machine-wide OOM kill). torch + triton map ~3-6 GB of address space at import; 16 GB leaves room.
CPU_ADDRESS_SPACE_BYTES = 16 * 1024**3


def scrubbed_env(parent: Mapping[str, str] | None = None, *, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    parent = os.environ if parent is None else parent
    env = {}
    for name, value in parent.items():
        if name.startswith(SECRET_PREFIXES) or SECRET_NAME.search(name):
            continue
        if name in KEEP_NAMES or name.startswith(KEEP_PREFIXES):
            env[name] = value
    env.update(extra or {})
    return env


def address_space_limit() -> int:
    """The CPU worker's RLIMIT_AS: CPU_ADDRESS_SPACE_BYTES, but never above 90% of physical memory + swap
    headroom (a 24 GB machine gets 16 GB; a 8 GB one 7.2 GB)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return CPU_ADDRESS_SPACE_BYTES
    return int(min(CPU_ADDRESS_SPACE_BYTES, max(0.9 * total, 6 * 1024**3)))


def apply_cpu_limits() -> None:
    """Called by the worker itself at start (not on CUDA: the driver maps huge virtual ranges)."""
    import resource

    limit = address_space_limit()
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(parent_pid: int) -> None:
    """Called by the worker itself at start: the kernel SIGKILLs it when the process that spawned it dies.

    The worker runs in its own session, out of reach of the signals that stop its parent; without this, a
    parent killed while a candidate hangs (SIGKILL, or a loop stopped by Ctrl-C whose evaluation process
    could not clean up) would leave the candidate spinning on the GPU. Linux only; elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return  # not fatal: the Evaluator still kills the worker's group on every normal path
    if os.getppid() != parent_pid:  # the parent died before the prctl: nobody is left to signal it
        os._exit(0)


def spawn(argv: Sequence[str], *, env: Mapping[str, str], cwd: Path, log_path: Path,
          pass_fds: Sequence[int]) -> subprocess.Popen:
    """Start a worker in a new session (its own process group, so a kill takes its children too)."""
    log = open(log_path, "ab")  # noqa: SIM115 - the child owns it; closed below in the parent
    try:
        return subprocess.Popen([sys.executable, *argv], env=dict(env), cwd=str(cwd), stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                pass_fds=tuple(pass_fds), close_fds=True)
    finally:
        log.close()


def kill_group(proc: subprocess.Popen, timeout_s: float = 10.0) -> None:
    """SIGKILL the worker's whole process group and reap it."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout_s)


def describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"
