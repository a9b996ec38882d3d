"""BERT-style encoder: embeddings + LayerNorm, non-causal attention (SDPA or written out),
post-LN residual blocks with a GELU MLP.

    autokernel-ci profile --model examples/models/bert.py:build_model --device cpu --dtype fp32

Random weights, no downloads. Sizes: "tiny" (CPU tests), "base" (BERT-base, 110 M parameters).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class BertConfig:
    vocab: int
    hidden: int
    heads: int
    ffn: int
    layers: int
    batch: int
    seq: int
    eps: float = 1e-12


SIZES = {
    "tiny": BertConfig(vocab=256, hidden=64, heads=4, ffn=128, layers=2, batch=2, seq=16),
    "base": BertConfig(vocab=30522, hidden=768, heads=12, ffn=3072, layers=12, batch=8, seq=512),
}
ATTENTION = ("sdpa", "eager")


def config(size: str) -> BertConfig:
    if size not in SIZES:
        raise ValueError(f"unknown BERT size {size!r}: choose one of {', '.join(SIZES)}")
    return SIZES[size]


class SelfAttention(nn.Module):
    def __init__(self, cfg: BertConfig, attn: str):
        super().__init__()
        if attn not in ATTENTION:
            raise ValueError(f"attn={attn!r}: choose one of {', '.join(ATTENTION)}")
        self.heads, self.attn = cfg.heads, attn
        self.query = nn.Linear(cfg.hidden, cfg.hidden)
        self.key = nn.Linear(cfg.hidden, cfg.hidden)
        self.value = nn.Linear(cfg.hidden, cfg.hidden)
        self.dense = nn.Linear(cfg.hidden, cfg.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, c = x.shape
        q, k, v = (p(x).view(b, s, self.heads, c // self.heads).transpose(1, 2)
                   for p in (self.query, self.key, self.value))
        if self.attn == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v)
        else:
            y = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(c // self.heads), dim=-1) @ v
        return self.dense(y.transpose(1, 2).reshape(b, s, c))


class Layer(nn.Module):
    def __init__(self, cfg: BertConfig, attn: str):
        super().__init__()
        self.attention = SelfAttention(cfg, attn)
        self.attention_norm = nn.LayerNorm(cfg.hidden, eps=cfg.eps)
        self.intermediate = nn.Linear(cfg.hidden, cfg.ffn)
        self.output = nn.Linear(cfg.ffn, cfg.hidden)
        self.output_norm = nn.LayerNorm(cfg.hidden, eps=cfg.eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.attention_norm(x + self.attention(x))
        return self.output_norm(x + self.output(F.gelu(self.intermediate(x))))


class Bert(nn.Module):
    def __init__(self, cfg: BertConfig, attn: str = "sdpa"):
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab, cfg.hidden)
        self.position_embeddings = nn.Embedding(cfg.seq, cfg.hidden)
        self.token_type_embeddings = nn.Embedding(2, cfg.hidden)
        self.embeddings_norm = nn.LayerNorm(cfg.hidden, eps=cfg.eps)
        self.layers = nn.ModuleList(Layer(cfg, attn) for _ in range(cfg.layers))
        gen = torch.Generator().manual_seed(0)
        for p in self.parameters():
            with torch.no_grad():
                scale = 0.05 if p.dim() == 1 else 1 / math.sqrt(p.shape[-1])
                p.copy_(torch.randn(p.shape, generator=gen) * scale)
        for m in self.modules():
            if isinstance(m, nn.LayerNorm):
                with torch.no_grad():
                    m.weight.copy_(1.0 + 0.1 * torch.randn(m.weight.shape, generator=gen))

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        pos = torch.arange(input_ids.shape[1], device=input_ids.device)
        types = token_type_ids if token_type_ids is not None else torch.zeros_like(input_ids)
        x = self.word_embeddings(input_ids) + self.position_embeddings(pos) + self.token_type_embeddings(types)
        x = self.embeddings_norm(x)
        for layer in self.layers:
            x = layer(x)
        return x


def build_model(size: str = "tiny", attn: str = "sdpa") -> Bert:
    return Bert(config(size), attn)


def example_inputs(size: str = "tiny", seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    cfg = config(size)
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq), generator=gen)
    types = (torch.arange(cfg.seq) >= cfg.seq // 2).long().expand(cfg.batch, -1).contiguous()
    return (ids, types)
