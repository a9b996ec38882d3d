"""LLaMA-style decoder, written the way LLaMA code is: RMSNorm as pow/mean/rsqrt, RoPE with slices
and cat, grouped-query attention through SDPA, SwiGLU MLP, LM head and an optional cross-entropy loss.

    autokernel-ci profile --model examples/models/llama.py:build_model --device cpu --dtype fp32
    autokernel-ci profile --model 'examples/models/llama.py:build_model(size="7b")' --dtype bf16

Random weights, no downloads. Sizes: "tiny" (CPU tests), "small" (CPU profiling where compute
dominates Python overhead), "7b" (LLaMA-7B layer shapes with 2 layers, for one H200).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class LlamaConfig:
    vocab: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    layers: int
    batch: int
    seq: int
    eps: float = 1e-6
    theta: float = 10000.0


# 7b: LLaMA-7B's layer (hidden 4096, 32 heads, ffn 11008) with 8 KV heads and 2 layers: ~0.62 B
# parameters (1.2 GB in bf16), batch 2 x 4096 tokens, so activations stay a few GB on one GPU.
SIZES = {
    "tiny": LlamaConfig(vocab=256, hidden=64, heads=4, kv_heads=2, ffn=160, layers=2, batch=2, seq=16),
    "small": LlamaConfig(vocab=2048, hidden=256, heads=8, kv_heads=4, ffn=688, layers=2, batch=1, seq=256),
    "7b": LlamaConfig(vocab=32000, hidden=4096, heads=32, kv_heads=8, ffn=11008, layers=2, batch=2, seq=4096),
}


def config(size: str) -> LlamaConfig:
    if size not in SIZES:
        raise ValueError(f"unknown LLaMA size {size!r}: choose one of {', '.join(SIZES)}")
    return SIZES[size]


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.to(x.dtype) * self.weight


def rope_tables(seq: int, dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = theta ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    angles = torch.outer(torch.arange(seq, dtype=torch.float64), inv_freq)
    return angles.cos().float(), angles.sin().float()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE on x[B, H, S, D] with cos/sin[S, D/2]."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = cfg.heads, cfg.kv_heads, cfg.hidden // cfg.heads
        self.q_proj = nn.Linear(cfg.hidden, cfg.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.hidden, cfg.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.hidden, cfg.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.heads * self.head_dim, cfg.hidden, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv_heads != self.heads)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, -1))


class MLP(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden, cfg.ffn, bias=False)
        self.up_proj = nn.Linear(cfg.hidden, cfg.ffn, bias=False)
        self.down_proj = nn.Linear(cfg.ffn, cfg.hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden, cfg.eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden, cfg.eps)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab, cfg.hidden)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.hidden, cfg.eps)
        self.lm_head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        cos, sin = rope_tables(cfg.seq, cfg.hidden // cfg.heads, cfg.theta)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        _init_weights(self)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) \
            -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Logits; with labels, (loss, logits) as Hugging Face's causal LMs return them."""
        s = input_ids.shape[1]
        x = self.embed_tokens(input_ids)
        cos, sin = self.cos[:s].to(x.dtype), self.sin[:s].to(x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        logits = self.lm_head(self.norm(x))
        if labels is None:
            return logits
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100), logits


def _init_weights(model: nn.Module) -> None:
    """Trained-looking scales: std 1/sqrt(fan_in) projections, norm weights spread around 1."""
    gen = torch.Generator().manual_seed(0)
    for p in model.parameters():
        with torch.no_grad():
            if p.dim() == 1:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[-1]))


def build_model(size: str = "tiny") -> Llama:
    return Llama(config(size))


def example_inputs(size: str = "tiny", with_labels: bool = True, seed: int = 0) -> tuple[torch.Tensor, ...]:
    cfg = config(size)
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq), generator=gen)
    if not with_labels:
        return (ids,)
    labels = torch.roll(ids, -1, dims=1)
    labels[:, -1] = -100  # no next token for the last position
    return (ids, labels)
