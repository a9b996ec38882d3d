"""Journal durability: fsync'd appends, torn last lines dropped, orphan versions removed, TSV rebuilt."""

from __future__ import annotations

import json
import logging

import pytest

from autokernel_ci.loop.journal import Journal, JournalError, kept_version_path


def _rec(n: int, status: str = "reverted", op: str = "rmsnorm-0", h: str = "") -> dict:
    return {"n": n, "op_id": op, "status": status, "source_hash": h or f"{n:016x}", "idea": f"idea {n}",
            "median_us": 10.0 + n, "duration_s": 1.0, "usd": 0.0}


def test_append_then_resume_reads_every_record(tmp_path):
    j = Journal.open(tmp_path, resume=False)
    for n in range(3):
        j.append(_rec(n, "kept" if n == 0 else "reverted"))
    j2 = Journal.open(tmp_path, resume=True)
    assert [r["n"] for r in j2.records] == [0, 1, 2] and j2.next_n() == 3
    assert [r["n"] for r in j2.experiments()] == [1, 2]
    tsv = (tmp_path / "results.tsv").read_text().splitlines()
    assert len(tsv) == 4 and tsv[0].startswith("n\t")


def test_fresh_open_refuses_an_existing_journal(tmp_path):
    Journal.open(tmp_path, resume=False).append(_rec(0, "kept"))
    with pytest.raises(JournalError, match="--resume"):
        Journal.open(tmp_path, resume=False)


@pytest.mark.parametrize("torn", [b'{"n": 3, "op_id": "rmsn', b'{"n": 3}', b"\x00\x00"])
def test_half_written_last_line_is_dropped_with_a_warning(tmp_path, caplog, torn):
    j = Journal.open(tmp_path, resume=False)
    for n in range(3):
        j.append(_rec(n))
    with open(tmp_path / "journal.jsonl", "ab") as fh:
        fh.write(torn)  # no newline: the write was killed midway
    caplog.set_level(logging.WARNING)
    j2 = Journal.open(tmp_path, resume=True)
    assert [r["n"] for r in j2.records] == [0, 1, 2]
    assert "half-written last line" in caplog.text
    j2.append(_rec(3))
    lines = (tmp_path / "journal.jsonl").read_text().splitlines()
    assert [json.loads(x)["n"] for x in lines] == [0, 1, 2, 3]  # the torn bytes are gone, not glued on


def test_corrupt_middle_line_is_an_error(tmp_path):
    j = Journal.open(tmp_path, resume=False)
    j.append(_rec(0))
    with open(tmp_path / "journal.jsonl", "a") as fh:
        fh.write("garbage\n")
    j.append(_rec(1))
    with pytest.raises(JournalError, match="line 2"):
        Journal.open(tmp_path, resume=True)


def test_uncommitted_kept_version_is_removed_on_resume(tmp_path):
    j = Journal.open(tmp_path, resume=False)
    j.store_version("rmsnorm-0", 0, "a" * 16, "starter")
    j.append(_rec(0, "kept", h="a" * 16))
    orphan = j.store_version("rmsnorm-0", 1, "b" * 16, "killed before its journal line")
    orphan.with_suffix(".json").write_text("{}")
    Journal.open(tmp_path, resume=True)
    assert not orphan.exists() and not orphan.with_suffix(".json").exists()
    assert kept_version_path(tmp_path, "rmsnorm-0", 0, "a" * 16).read_text() == "starter"


def test_unknown_status_is_refused(tmp_path):
    with pytest.raises(JournalError, match="status"):
        Journal.open(tmp_path, resume=False).append(_rec(1, "great"))
