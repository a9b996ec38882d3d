"""GPT-2 (decoder): LayerNorm, GELU MLP, causal attention written out (matmul/softmax/matmul, the
original GPT-2 code) or through SDPA (`attn="sdpa"`), tied LM head.

    autokernel-ci profile --model examples/models/gpt2.py:build_model --device cpu --dtype fp32
    autokernel-ci profile --model 'examples/models/gpt2.py:build_model(size="small", attn="sdpa")'

Random weights, no downloads. Sizes: "tiny" (CPU tests), "small" (GPT-2 small, 124 M parameters).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class GPT2Config:
    vocab: int
    hidden: int
    heads: int
    layers: int
    batch: int
    seq: int
    eps: float = 1e-5


SIZES = {
    "tiny": GPT2Config(vocab=256, hidden=64, heads=4, layers=2, batch=2, seq=16),
    "small": GPT2Config(vocab=50257, hidden=768, heads=12, layers=12, batch=8, seq=1024),
}
ATTENTION = ("eager", "sdpa")


def config(size: str) -> GPT2Config:
    if size not in SIZES:
        raise ValueError(f"unknown GPT-2 size {size!r}: choose one of {', '.join(SIZES)}")
    return SIZES[size]


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPT2Config, attn: str):
        super().__init__()
        if attn not in ATTENTION:
            raise ValueError(f"attn={attn!r}: choose one of {', '.join(ATTENTION)}")
        self.heads, self.attn = cfg.heads, attn
        self.c_attn = nn.Linear(cfg.hidden, 3 * cfg.hidden)
        self.c_proj = nn.Linear(cfg.hidden, cfg.hidden)
        self.register_buffer("causal", torch.ones(cfg.seq, cfg.seq, dtype=torch.bool).tril(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (t.view(b, s, self.heads, c // self.heads).transpose(1, 2) for t in (q, k, v))
        if self.attn == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(~self.causal[:s, :s], float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, s, c))


class MLP(nn.Module):
    def __init__(self, cfg: GPT2Config):
        super().__init__()
        self.c_fc = nn.Linear(cfg.hidden, 4 * cfg.hidden)
        self.c_proj = nn.Linear(4 * cfg.hidden, cfg.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg: GPT2Config, attn: str):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.hidden, eps=cfg.eps)
        self.attn = CausalSelfAttention(cfg, attn)
        self.ln_2 = nn.LayerNorm(cfg.hidden, eps=cfg.eps)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    def __init__(self, cfg: GPT2Config, attn: str = "eager"):
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab, cfg.hidden)
        self.wpe = nn.Embedding(cfg.seq, cfg.hidden)
        self.h = nn.ModuleList(Block(cfg, attn) for _ in range(cfg.layers))
        self.ln_f = nn.LayerNorm(cfg.hidden, eps=cfg.eps)
        self.lm_head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        _init_weights(self)
        self.lm_head.weight = self.wte.weight  # tied, as in GPT-2

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.wte(input_ids) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def _init_weights(model: nn.Module) -> None:
    gen = torch.Generator().manual_seed(0)
    for p in model.parameters():
        with torch.no_grad():
            if p.dim() == 1:
                p.copy_(0.05 * torch.randn(p.shape, generator=gen))  # biases: small, not zero
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[-1]))
    for m in model.modules():
        if isinstance(m, nn.LayerNorm):
            with torch.no_grad():
                m.weight.copy_(1.0 + 0.1 * torch.randn(m.weight.shape, generator=gen))


def build_model(size: str = "tiny", attn: str = "eager") -> GPT2:
    return GPT2(config(size), attn)


def example_inputs(size: str = "tiny", seed: int = 0) -> tuple[torch.Tensor]:
    cfg = config(size)
    gen = torch.Generator().manual_seed(seed)
    return (torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq), generator=gen),)
