"""The loop driving the LLM agent against the scripted local server: spend bounded, invalid replies journaled."""

from __future__ import annotations

import pytest
from llm_server import COMPLETION_TOKENS, PROMPT_TOKENS, ScriptedLLM, Step
from loop_helpers import make_plan, read_journal

from autokernel_ci.kernelfile import load
from autokernel_ci.loop import Budget, LoopSettings, optimize
from autokernel_ci.paths import starter_kernel

SECRET = "sk-loop-secret-77d1e0"
COST = (PROMPT_TOKENS * 3.0 + COMPLETION_TOKENS * 15.0) / 1e6


@pytest.mark.timeout(240)
def test_llm_loop_counts_spend_and_journals_invalid_replies(tmp_path, monkeypatch, capsys):
    starter = load(starter_kernel("rmsnorm"))
    good = starter.with_config({**starter.config, "VARIANT": "row"}).source
    evil = starter.source.replace("import torch\n", "import os\nimport torch\n", 1)
    with ScriptedLLM() as server:
        server.script = [Step(f"IDEA: one row per program\n```python\n{good}```"),
                         Step(f"IDEA: read the answer\n```python\n{evil}```")]
        for key, value in {"AUTOKERNEL_LLM_API_BASE": server.api_base, "AUTOKERNEL_LLM_API_KEY": SECRET,
                           "AUTOKERNEL_LLM_USD_PER_MTOK_IN": "3", "AUTOKERNEL_LLM_USD_PER_MTOK_OUT": "15"}.items():
            monkeypatch.setenv(key, value)
        settings = LoopSettings(agent="llm", llm_model="openai/test-model", device="cpu", tune_after_llm=0,
                                verify_shape_sets=("cpu",), budget=Budget(minutes=None, usd=2 * COST * 0.99))
        summary = optimize(make_plan((("rmsnorm-0", "rmsnorm", 0.5),)), tmp_path / "run", settings)
    records = read_journal(tmp_path / "run")
    assert [r["n"] for r in records] == [0, 1, 2]
    assert records[1]["agent"] == "llm" and records[1]["idea"] == "one row per program"
    assert records[1]["status"] in ("kept", "reverted") and records[1]["stages"]["smoke"] == "pass"
    assert records[2]["status"] == "invalid" and "import os" in records[2]["reason"]
    assert records[2]["usd"] == pytest.approx(COST, rel=1e-4)
    assert summary["usd"] == pytest.approx(2 * COST, rel=1e-4) and "max USD" in summary["stopped"]
    assert len(server.received) == 2  # stopped by spend: no third call
    out = capsys.readouterr()
    assert SECRET not in out.out + out.err
    for path in (tmp_path / "run").rglob("*"):
        if path.is_file() and path.suffix in (".json", ".jsonl", ".tsv", ".py"):
            assert SECRET not in path.read_text(), path
