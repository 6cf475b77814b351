"""Rotary embedding against transformers' own frequency math and rotation (default, linear, llama3)."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

from radixlm.layers.rotary_embedding import RotaryEmbedding, get_rope, rope_config

SCALINGS = {
    "default": None,
    "linear": {"rope_type": "linear", "factor": 4.0},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 256},
}


def hf_rotate(scaling: dict | None, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor,
              heads: int, kv_heads: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    params = {"rope_theta": 500000.0, "rope_type": "default", **(scaling or {})}
    cfg = LlamaConfig(hidden_size=heads * head_dim, num_attention_heads=heads, num_key_value_heads=kv_heads,
                      max_position_embeddings=2048, rope_parameters=params)
    rope = LlamaRotaryEmbedding(cfg)
    cos, sin = rope(q, positions.unsqueeze(0))
    t = q.shape[0]
    qh = q.view(1, t, heads, head_dim).transpose(1, 2)
    kh = k.view(1, t, kv_heads, head_dim).transpose(1, 2)
    qo, ko = apply_rotary_pos_emb(qh, kh, cos, sin)
    return qo.transpose(1, 2).reshape(t, -1), ko.transpose(1, 2).reshape(t, -1)


@pytest.mark.parametrize("kind", list(SCALINGS))
def test_neox_rope_matches_transformers(kind: str) -> None:
    heads, kv_heads, head_dim = 4, 2, 32
    g = torch.Generator().manual_seed(0)
    positions = torch.tensor([0, 1, 5, 100, 255, 256, 1000, 2047])
    q = torch.randn(len(positions), heads * head_dim, generator=g)
    k = torch.randn(len(positions), kv_heads * head_dim, generator=g)
    rope = RotaryEmbedding(head_dim, head_dim, 2048, 500000.0, True, SCALINGS[kind])
    ours_q, ours_k = rope(positions, q.clone(), k.clone())
    ref_q, ref_k = hf_rotate(SCALINGS[kind], q, k, positions, heads, kv_heads, head_dim)
    torch.testing.assert_close(ours_q, ref_q, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours_k, ref_k, rtol=1e-5, atol=1e-5)


def test_gptj_style_rotates_interleaved_pairs() -> None:
    """Interleaved style = complex multiplication of (x[2i], x[2i+1]) by exp(i * pos * freq_i)."""
    head_dim, base = 16, 10000.0
    rope = RotaryEmbedding(head_dim, head_dim, 64, base, is_neox_style=False)
    positions = torch.tensor([0, 3, 63])
    q = torch.randn(3, 2 * head_dim)
    k = torch.randn(3, head_dim)
    ours_q, _ = rope(positions, q, k)
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))
    angle = positions.float()[:, None] * inv_freq[None, :]
    z = torch.view_as_complex(q.view(3, 2, head_dim // 2, 2).contiguous())
    ref = torch.view_as_real(z * torch.polar(torch.ones_like(angle), angle)[:, None, :]).reshape(3, -1)
    torch.testing.assert_close(ours_q, ref, rtol=1e-5, atol=1e-5)


def test_partial_rotary_leaves_tail_untouched() -> None:
    rope = RotaryEmbedding(32, 16, 64, 10000.0, True)
    q, k = torch.randn(4, 64), torch.randn(4, 32)
    qo, ko = rope(torch.tensor([1, 2, 3, 4]), q, k)
    assert torch.equal(qo.view(4, 2, 32)[..., 16:], q.view(4, 2, 32)[..., 16:])
    assert not torch.allclose(qo.view(4, 2, 32)[..., :16], q.view(4, 2, 32)[..., :16])


def test_get_rope_shares_one_cache_and_reads_new_style_config() -> None:
    cfg = LlamaConfig(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 1234.0})
    base, scaling = rope_config(cfg)
    assert base == 1234.0 and scaling["rope_type"] == "linear"
    assert get_rope(64, 64, 128, base, True, scaling) is get_rope(64, 64, 128, base, True, dict(scaling))


def test_unknown_scaling_type_is_named() -> None:
    with pytest.raises(ValueError, match="yarnish"):
        RotaryEmbedding(16, 16, 8, 10000.0, True, {"rope_type": "yarnish", "factor": 2.0})
