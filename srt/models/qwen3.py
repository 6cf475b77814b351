"""Qwen3 (dense): the Llama layout with per-head RMSNorm on q and k before rotary, no QKV bias."""

from __future__ import annotations

import torch
from transformers import PretrainedConfig

from radixlm.layers.layernorm import RMSNorm
from radixlm.models.llama import LlamaAttention, LlamaForCausalLM


class Qwen3Attention(LlamaAttention):
    def __init__(self, config: PretrainedConfig, layer_id: int, tp_rank: int, tp_size: int) -> None:
        super().__init__(config, layer_id, tp_rank, tp_size)
        self.q_norm = RMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, eps=config.rms_norm_eps)

    def prepare_qk(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q = self.q_norm(q.reshape(-1, self.head_dim)).view(q.shape)
        k = self.k_norm(k.reshape(-1, self.head_dim)).view(k.shape)
        return q, k


class Qwen3ForCausalLM(LlamaForCausalLM):
    attention_cls = Qwen3Attention
