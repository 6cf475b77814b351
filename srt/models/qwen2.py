"""Qwen2 / Qwen2.5: the Llama layout with a bias on the fused QKV projection."""

from __future__ import annotations

from radixlm.models.llama import LlamaAttention, LlamaForCausalLM


class Qwen2Attention(LlamaAttention):
    qkv_bias_default = True


class Qwen2ForCausalLM(LlamaForCausalLM):
    attention_cls = Qwen2Attention
