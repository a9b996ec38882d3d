"""The run directory's durable state (docs/artifacts.md §2): journal.jsonl, results.tsv, kept versions.

Crash safety, in the order the orchestrator writes one experiment:
1. a kept version goes to kernels/<op_id>/<n:04d>_<hash>.py (write + fsync + rename);
2. the journal line is appended, flushed and fsync'd: this is the commit point;
3. results.tsv, best/<op_id>.py and summary.json are derived and rewritten.
After `kill -9` anywhere, `Journal.open(resume=True)` keeps every committed record, drops a
half-written last line (with a warning), deletes kept-version files no record names (the
experiment they belong to was never committed and is redone) and rebuilds results.tsv.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

JOURNAL = "journal.jsonl"
RESULTS_TSV = "results.tsv"
KERNELS_DIR = "kernels"
BEST_DIR = "best"

# Journal statuses (docs/artifacts.md §2). A kept version has status "kept"; the starter of each op
# is journaled as n=0 with status "kept" and idea "starter".
STATUSES = ("kept", "reverted", "rejected", "crash", "timeout", "oom", "compile_error", "invalid")


def is_experiment(record: dict[str, Any]) -> bool:
    """An agent's experiment (n >= 1), not the starter baseline each op's journal opens with (n == 0): what
    summary.json, the optimize table and the publication all count."""
    return int(record.get("n", 0)) >= 1


TSV_COLUMNS = ("n", "time", "op_id", "status", "median_us", "best_us_before", "speedup_vs_eager",
               "speedup_vs_compile", "pct_of_ceiling", "duration_s", "usd", "source_hash", "idea")


class JournalError(RuntimeError):
    pass


def atomic_write(path: Path, data: str | bytes) -> None:
    """Write `data` to `path` so a reader sees the old or the new file, never a torn one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    mode = "wb" if isinstance(data, bytes) else "w"
    with open(tmp, mode) as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def kept_version_path(run_dir: Path, op_id: str, n: int, source_hash: str) -> Path:
    return run_dir / KERNELS_DIR / op_id / f"{n:04d}_{source_hash}.py"


def _tsv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("\t", " ").replace("\n", " ")


def tsv_line(record: dict[str, Any]) -> str:
    return "\t".join(_tsv_cell(record.get(c)) for c in TSV_COLUMNS) + "\n"


class Journal:
    """Append-only experiment log of one run directory."""

    def __init__(self, run_dir: Path, records: list[dict[str, Any]]):
        self.run_dir = run_dir
        self.path = run_dir / JOURNAL
        self.records = records

    # -- opening ---------------------------------------------------------------------------------
    @classmethod
    def open(cls, run_dir: str | Path, *, resume: bool) -> Journal:
        run_dir = Path(run_dir)
        path = run_dir / JOURNAL
        if not resume:
            if path.exists() and path.stat().st_size > 0:
                raise JournalError(f"{path} already holds a journal: pass --resume to continue it, "
                                   "or choose an empty --run-dir")
            run_dir.mkdir(parents=True, exist_ok=True)
            path.write_text("")
            (run_dir / RESULTS_TSV).write_text("\t".join(TSV_COLUMNS) + "\n")
            return cls(run_dir, [])
        if not path.exists():
            raise JournalError(f"--resume: {path} does not exist; start the run without --resume")
        journal = cls(run_dir, _read_records(path))
        journal._drop_orphan_versions()
        journal.rewrite_tsv()
        return journal

    def _drop_orphan_versions(self) -> None:
        named = {(r["op_id"], r["n"], r["source_hash"]) for r in self.records if r.get("status") == "kept"}
        root = self.run_dir / KERNELS_DIR
        for f in sorted(root.glob("*/*")) if root.is_dir() else []:
            if f.suffix not in (".py", ".json"):
                continue
            stem = f.stem.split("_", 1)
            if len(stem) == 2 and stem[0].isdigit() and (f.parent.name, int(stem[0]), stem[1]) not in named:
                log.warning("dropping %s: its experiment was never journaled (the run was killed) and is redone",
                            f.name)
                f.unlink()
        for tmp in root.glob("*/.*.tmp*") if root.is_dir() else []:
            tmp.unlink()

    # -- writing ---------------------------------------------------------------------------------
    def append(self, record: dict[str, Any]) -> None:
        """Commit one experiment: append its line, flush and fsync before returning."""
        if record.get("status") not in STATUSES:
            raise JournalError(f"journal status {record.get('status')!r} is not one of {', '.join(STATUSES)}")
        line = json.dumps(record, sort_keys=False, allow_nan=False) + "\n"
        with open(self.path, "a") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())
        self.records.append(record)
        with open(self.run_dir / RESULTS_TSV, "a") as fh:
            fh.write(tsv_line(record))

    def rewrite_tsv(self) -> None:
        text = "\t".join(TSV_COLUMNS) + "\n" + "".join(tsv_line(r) for r in self.records)
        atomic_write(self.run_dir / RESULTS_TSV, text)

    def store_version(self, op_id: str, n: int, source_hash: str, source: str) -> Path:
        path = kept_version_path(self.run_dir, op_id, n, source_hash)
        atomic_write(path, source)
        return path

    # -- reading ---------------------------------------------------------------------------------
    def experiments(self) -> list[dict[str, Any]]:
        """Records of agent experiments (n >= 1); n = 0 records are the starters' baselines."""
        return [r for r in self.records if is_experiment(r)]

    def next_n(self) -> int:
        return max((r["n"] for r in self.records), default=0) + 1

    def for_op(self, op_id: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r["op_id"] == op_id]


def _read_records(path: Path) -> list[dict[str, Any]]:
    """Committed records of `path`; a torn last line (a write killed midway) is dropped and cut off."""
    raw = path.read_bytes()
    *complete, tail = raw.split(b"\n")  # every piece but the last ended with a newline
    records: list[dict[str, Any]] = []
    good_end = 0
    for i, line in enumerate(complete):
        try:
            if line.strip():
                records.append(json.loads(line))
        except ValueError:
            if i != len(complete) - 1 or tail.strip():
                raise JournalError(f"{path}: line {i + 1} is not JSON and is not the last line: the journal is "
                                   "corrupt beyond a killed write; inspect it by hand") from None
            log.warning("%s: dropping a torn last line (%d bytes) left by a killed run", path, len(line))
            break
        good_end += len(line) + 1
    if tail.strip():
        log.warning("%s: dropping a half-written last line (%d bytes) left by a killed run", path, len(tail))
    if good_end < len(raw):
        with open(path, "r+b") as fh:
            fh.truncate(good_end)
            fh.flush()
            os.fsync(fh.fileno())
    return records
