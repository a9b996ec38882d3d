"""The LLM agent (DESIGN.md §7): any model litellm accepts, prompts from jinja2 templates.

The reply is untrusted data. It is only parsed here (regex + `ast` through the policy); the
harness is the only place that ever imports it, in a sandboxed child. Spend is counted with
litellm's cost functions and reported per proposal so the loop can bound it (--max-usd).
Keys come from the environment (the provider's usual variables, e.g. OPENAI_API_KEY, or
AUTOKERNEL_LLM_API_KEY) and are never logged, journaled or put in an error message.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jinja2

from autokernel_ci.agents.base import Agent, AgentState, Proposal
from autokernel_ci.agents.policy import ALLOWED_IMPORTS, CUDA_IMPORTS, PolicyError, check
from autokernel_ci.kernelfile import KernelFileError
from autokernel_ci.paths import templates_dir
from autokernel_ci.specs import get_spec

log = logging.getLogger(__name__)

ENV_MODEL, ENV_API_BASE, ENV_API_KEY = "AUTOKERNEL_LLM_MODEL", "AUTOKERNEL_LLM_API_BASE", "AUTOKERNEL_LLM_API_KEY"
ENV_PRICE_IN, ENV_PRICE_OUT = "AUTOKERNEL_LLM_USD_PER_MTOK_IN", "AUTOKERNEL_LLM_USD_PER_MTOK_OUT"
RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
# Longest Retry-After we honour: a provider asking for more than 5 minutes is effectively down for
# this run, and sleeping longer would burn the loop's wall budget on nothing.
MAX_RETRY_AFTER_S = 300.0
HISTORY_IN_PROMPT = 20  # last ideas shown; ~40 tokens each keeps the prompt small
FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+.-]*)[ \t]*\r?\n(.*?)```", re.DOTALL)
IDEA_LINE = re.compile(r"^\s*IDEA:\s*(.+)$", re.MULTILINE)
SECRET_ENV = re.compile(r"(API_KEY|_TOKEN|_SECRET|ACCESS_KEY)$")


class ReplyError(ValueError):
    """The reply does not hold exactly one acceptable kernel file."""


@dataclass
class LLMSettings:
    model: str
    api_base: str | None = None
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = 180.0
    max_attempts: int = 5  # the first try plus 4 retries on 429/5xx/timeouts
    backoff_s: float = 2.0  # first retry waits this, then doubles
    backoff_max_s: float = 60.0
    temperature: float = 0.7
    max_tokens: int = 8192
    usd_per_mtok_in: float | None = None  # override litellm's price map (local or unlisted models)
    usd_per_mtok_out: float | None = None

    @classmethod
    def from_env(cls, model: str | None = None, env: dict[str, str] | None = None, **overrides: Any) -> LLMSettings:
        env = dict(os.environ if env is None else env)
        chosen = model or env.get(ENV_MODEL)
        if not chosen:
            raise ValueError(f"--agent llm needs a model: pass --llm-model (a litellm model string such as "
                             f"'openai/gpt-4o') or set {ENV_MODEL}")

        def price(name: str) -> float | None:
            text = env.get(name)
            if text is None or text == "":
                return None
            try:
                return float(text)
            except ValueError:
                raise ValueError(f"{name}={text!r} is not a number of USD per million tokens") from None

        return cls(model=chosen, api_base=env.get(ENV_API_BASE) or None, api_key=env.get(ENV_API_KEY) or None,
                   usd_per_mtok_in=price(ENV_PRICE_IN), usd_per_mtok_out=price(ENV_PRICE_OUT), **overrides)


def secret_values(env: dict[str, str] | None = None, extra: tuple[str | None, ...] = ()) -> list[str]:
    env = dict(os.environ if env is None else env)
    found = [v for k, v in env.items() if SECRET_ENV.search(k) and v and len(v) >= 6]
    return sorted({*found, *(e for e in extra if e)}, key=len, reverse=True)


def redact(text: str, secrets: list[str]) -> str:
    for s in secrets:
        text = text.replace(s, "***")
    return text


def extract_kernel(reply: str) -> tuple[str, str]:
    """(source, idea) from a reply holding exactly one ```python block; ReplyError otherwise."""
    blocks = [(lang.lower(), body) for lang, body in FENCE.findall(reply or "")]
    python = [body for lang, body in blocks if lang in ("python", "py", "python3")]
    if not python:
        what = "a code block not marked python" if blocks else "prose only, no code block"
        raise ReplyError(f"reply has no ```python block ({what}); exactly one complete kernel file is required")
    if len(python) > 1:
        raise ReplyError(f"reply has {len(python)} ```python blocks; exactly one complete kernel file is required")
    idea_match = IDEA_LINE.search(FENCE.sub("", reply))
    idea = idea_match.group(1).strip() if idea_match else ""
    return python[0].strip() + "\n", idea[:200]


def _retry_after(exc: BaseException) -> float | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None) or getattr(exc, "litellm_response_headers", None) or {}
    try:
        value = headers.get("retry-after") or headers.get("Retry-After")
    except AttributeError:
        return None
    try:
        return min(float(value), MAX_RETRY_AFTER_S) if value is not None else None
    except ValueError:
        return None


def _retryable(exc: BaseException) -> bool:
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return status in RETRY_STATUS
    name = type(exc).__name__
    return name in ("Timeout", "APITimeoutError", "APIConnectionError", "ServiceUnavailableError",
                    "InternalServerError", "RateLimitError")


def _litellm():
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # never fetch the price map at import
    import litellm

    litellm.suppress_debug_info = True
    return litellm


class LLMAgent(Agent):
    name = "llm"

    def __init__(self, settings: LLMSettings, *, sleep: Callable[[float], None] = time.sleep):
        self.settings = settings
        self.sleep = sleep
        self._litellm = _litellm()
        self._env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir())),
                                       undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                                       autoescape=False)
        self._secrets = secret_values(extra=(settings.api_key,))
        self._price_warned = False
        self.calls = 0
        self.usd = 0.0

    # -- prompts -----------------------------------------------------------------------------------
    def messages(self, state: AgentState) -> list[dict[str, str]]:
        spec = get_spec(state.kernel_type)
        backend = state.best.backend
        imports = sorted((ALLOWED_IMPORTS | (CUDA_IMPORTS if backend == "cuda" else frozenset())) - {"__future__"})
        gpu_name = state.gpu.get("name") or ("a CPU (Triton interpreter)" if state.device == "cpu" else "the GPU")
        system = self._env.get_template("agent_system.j2").render(
            gpu_name=gpu_name, kernel_type=state.kernel_type, backend=backend,
            signature=f"({', '.join(spec.arg_names)})", allowed_imports=", ".join(imports),
            allowed_calls=", ".join(spec.allowed_calls))
        history = [h for h in state.history if h.get("n", 0) >= 1][-HISTORY_IN_PROMPT:]
        user = self._env.get_template("agent_user.j2").render(
            kernel_type=state.kernel_type, spec_summary=spec.summary, signature=f"({', '.join(spec.arg_names)})",
            shapes=[spec.describe_shape(s) for s in state.shapes], dtype=state.dtype, metric=spec.primary_metric,
            floor_us=state.floor_us, bound="compute" if spec.primary_metric == "TFLOP/s" else "memory",
            gpu_facts=_gpu_facts(state.gpu), starter_us=state.starter_us, best_us=state.best_us,
            eager_us=state.eager_us, compile_us=state.compile_us, gap=state.roofline_gap, last=state.last,
            history=history, source=state.best.source.rstrip(), fmt=lambda v: f"{v:.2f}" if v else "n/a")
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    # -- the call ----------------------------------------------------------------------------------
    def _cost(self, response: Any) -> float:
        s = self.settings
        try:
            if s.usd_per_mtok_in is not None or s.usd_per_mtok_out is not None:
                return float(self._litellm.completion_cost(
                    completion_response=response,
                    custom_cost_per_token={"input_cost_per_token": (s.usd_per_mtok_in or 0.0) / 1e6,
                                           "output_cost_per_token": (s.usd_per_mtok_out or 0.0) / 1e6}))
            return float(self._litellm.completion_cost(completion_response=response))
        except Exception as exc:  # noqa: BLE001 - an unpriced model must not stop the run
            if not self._price_warned:
                log.warning("no price known for %s (%s): spend counts as $0, so --max-usd cannot bound it; set "
                            "%s and %s (USD per million tokens)", s.model, type(exc).__name__,
                            ENV_PRICE_IN, ENV_PRICE_OUT)
                self._price_warned = True
            return 0.0

    def complete(self, messages: list[dict[str, str]]) -> tuple[str, float]:
        """(reply text, USD) with retries on 429/5xx/timeouts; RuntimeError (redacted) after the last try."""
        s = self.settings
        kwargs: dict[str, Any] = {"model": s.model, "messages": messages, "timeout": s.timeout_s,
                                  "temperature": s.temperature, "max_tokens": s.max_tokens,
                                  "num_retries": 0, "max_retries": 0}  # our backoff, not three stacked ones
        if s.api_base:
            kwargs["api_base"] = s.api_base
        if s.api_key:
            kwargs["api_key"] = s.api_key
        last: BaseException | None = None
        for attempt in range(1, s.max_attempts + 1):
            self.calls += 1
            try:
                response = self._litellm.completion(**kwargs)
            except Exception as exc:  # noqa: BLE001 - classified below; anything else is final
                last = exc
                if not _retryable(exc) or attempt == s.max_attempts:
                    break
                wait = min(s.backoff_s * 2 ** (attempt - 1), s.backoff_max_s)
                wait = max(wait, _retry_after(exc) or 0.0)
                log.warning("LLM call %d/%d failed (%s); retrying in %.1f s", attempt, s.max_attempts,
                            redact(_short(exc), self._secrets), wait)
                self.sleep(wait)
                continue
            usd = self._cost(response)
            self.usd += usd
            content = response.choices[0].message.content or ""
            return content, usd
        raise RuntimeError(f"LLM request to {s.model} failed after {attempt} attempt(s): "
                           f"{redact(_short(last), self._secrets)}")

    def propose(self, state: AgentState) -> Proposal | None:
        try:
            reply, usd = self.complete(self.messages(state))
        except RuntimeError as exc:
            return Proposal(source="", idea="(no reply)", invalid=str(exc), agent=self.name)
        try:
            source, idea = extract_kernel(reply)
            check(source, kernel_type=state.kernel_type, backend=state.best.backend)
        except (ReplyError, PolicyError, KernelFileError) as exc:
            return Proposal(source="", idea=_idea_of(reply), usd=usd, invalid=redact(str(exc), self._secrets),
                            agent=self.name)
        return Proposal(source=source, idea=idea or "(no IDEA line)", usd=usd, agent=self.name)


def _idea_of(reply: str) -> str:
    match = IDEA_LINE.search(reply or "")
    return match.group(1).strip()[:200] if match else "(malformed reply)"


def _short(exc: BaseException | None) -> str:
    if exc is None:
        return "no error"
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}"


def _gpu_facts(gpu: dict[str, Any]) -> str:
    if not gpu:
        return ""
    keys = ("name", "sms", "bandwidth_gbs", "l2_mb", "peak_tflops", "smem_kb_per_sm")
    return ", ".join(f"{k}={gpu[k]}" for k in keys if gpu.get(k) is not None)
