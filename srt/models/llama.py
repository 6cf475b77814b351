"""The Llama family (Llama 2/3/3.1/3.2, SmolLM2, Mistral), built from `radixlm.layers`.

Qwen2 and Qwen3 subclass these pieces: Qwen2 adds a bias to the fused QKV projection,
Qwen3 normalises q and k per head (`LlamaAttention.prepare_qk`).

In extend batches the last layer stores every new token's K/V but runs the rest (attention
output, o_proj, MLP) for each request's last new token only, the one row the next-token
logits read (`LlamaForCausalLM.skips_unread_rows` says when).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Optional

import torch
from torch import nn
from transformers import PretrainedConfig

from radixlm import environ
from radixlm.layers.layernorm import RMSNorm
from radixlm.layers.linear import MergedColumnParallelLinear, QKVParallelLinear, RowParallelLinear
from radixlm.layers.logits_processor import LogitsProcessor, LogitsProcessorOutput
from radixlm.layers.radix_attention import RadixAttention
from radixlm.layers.rotary_embedding import get_rope, rope_config
from radixlm.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding
from radixlm.models.weight_mapping import load_weights_into

if TYPE_CHECKING:
    from radixlm.model_executor.forward_batch import ForwardBatch


class LlamaMLP(nn.Module):
    def __init__(self, config: PretrainedConfig, tp_rank: int, tp_size: int) -> None:
        super().__init__()
        if getattr(config, "hidden_act", "silu") != "silu":
            raise ValueError(f"unsupported hidden_act {config.hidden_act!r}; only 'silu' is implemented")
        bias = getattr(config, "mlp_bias", False)
        inter = config.intermediate_size
        self.gate_up_proj = MergedColumnParallelLinear(config.hidden_size, [inter, inter], bias=bias,
                                                       tp_rank=tp_rank, tp_size=tp_size, gemv_op="gate_up")
        self.down_proj = RowParallelLinear(inter, config.hidden_size, bias=bias, tp_rank=tp_rank, tp_size=tp_size,
                                           gemv_op="down")

    def forward(self, x: torch.Tensor, residual: torch.Tensor, norm: RMSNorm) -> tuple[torch.Tensor, torch.Tensor]:
        """`(mlp(norm(x + residual)), x + residual)`: the norm runs inside gate_up, SiLU-and-mul inside gate_up
        (the CUDA GEMVs) or inside down (the Triton GEMVs, and the unfused path's own kernel)."""
        fused = self.gate_up_proj.forward_normed_silu_mul(x, residual, norm)
        if fused is not None:
            act, residual = fused
            return self.down_proj(act), residual
        gate_up, residual = self.gate_up_proj.forward_normed(x, residual, norm)
        return self.down_proj.forward_silu_mul(gate_up), residual


class LlamaAttention(nn.Module):
    qkv_bias_default = False

    def __init__(self, config: PretrainedConfig, layer_id: int, tp_rank: int, tp_size: int) -> None:
        super().__init__()
        total_heads, total_kv = config.num_attention_heads, getattr(config, "num_key_value_heads", None)
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // total_heads
        qkv_bias = getattr(config, "attention_bias", False) or self.qkv_bias_default
        self.qkv_proj = QKVParallelLinear(config.hidden_size, self.head_dim, total_heads, total_kv, bias=qkv_bias,
                                          tp_rank=tp_rank, tp_size=tp_size, gemv_op="qkv")
        self.num_heads, self.num_kv_heads = self.qkv_proj.num_heads, self.qkv_proj.num_kv_heads
        self.q_size, self.kv_size = self.qkv_proj.q_size, self.qkv_proj.kv_size
        self.o_proj = RowParallelLinear(total_heads * self.head_dim, config.hidden_size,
                                        bias=getattr(config, "attention_bias", False), tp_rank=tp_rank, tp_size=tp_size,
                                        gemv_op="o_proj")
        base, scaling = rope_config(config)
        rotary_dim = int(self.head_dim * getattr(config, "partial_rotary_factor", 1.0))
        self.rotary_emb = get_rope(self.head_dim, rotary_dim, config.max_position_embeddings, base,
                                   is_neox_style=True, rope_scaling=scaling)
        self.attn = RadixAttention(self.num_heads, self.head_dim, self.head_dim ** -0.5, self.num_kv_heads, layer_id)

    def prepare_qk(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Hook before rotary embedding (Qwen3 normalises q/k here)."""
        return q, k

    def forward(self, positions: torch.Tensor, hidden_states: torch.Tensor, forward_batch: "ForwardBatch",
                residual: Optional[torch.Tensor], norm: RMSNorm) -> tuple[torch.Tensor, torch.Tensor]:
        """`(attention(norm(hidden_states + residual)), hidden_states + residual)`, the norm inside the QKV
        projection; residual None (the first layer) normalises hidden_states alone and returns it as residual."""
        q, k, v, residual = self._project(hidden_states, residual, norm)
        if self.attn.takes_rope(forward_batch):  # decode on the triton backend: one kernel rotates, stores, attends
            return self.o_proj(self.attn(q, k, v, forward_batch, rope=self.rotary_emb)), residual
        q, k, v, save_kv_cache = self._rotate(positions, q, k, v, forward_batch)
        return self.o_proj(self.attn(q, k, v, forward_batch, save_kv_cache=save_kv_cache)), residual

    def forward_last(self, positions: torch.Tensor, hidden_states: torch.Tensor, forward_batch: "ForwardBatch",
                     residual: Optional[torch.Tensor], norm: RMSNorm, last_index: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """`forward`'s rows at `last_index` (`[bs, hidden]` each) of an extend batch: K/V are still
        projected, rotated and stored for every new token, but only those rows' queries attend."""
        q, k, v, residual = self._project(hidden_states, residual, norm)
        q, k, v, save_kv_cache = self._rotate(positions, q, k, v, forward_batch)
        out = self.attn.forward_extend_last(q[last_index], k, v, forward_batch, save_kv_cache=save_kv_cache)
        return self.o_proj(out), residual[last_index]

    def _project(self, hidden_states: torch.Tensor, residual: Optional[torch.Tensor], norm: RMSNorm
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """`(q, k, v, hidden_states + residual)` of `norm(hidden_states + residual)`, before rotary."""
        qkv, residual = self.qkv_proj.forward_normed(hidden_states, residual, norm)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q, k = self.prepare_qk(q, k)
        return q, k, v, residual

    def _rotate(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                forward_batch: "ForwardBatch") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, bool]:
        """`(q, k, v, save_kv_cache)` with q/k rotated; save_kv_cache is False where k/v are in the pool already."""
        # on CUDA one kernel rotates q/k in place inside qkv and writes k/v into the pool: no copies
        if self.rotary_emb.forward_and_store_kv(positions, q, k, v, self.attn.kv_store_target(forward_batch)):
            return q, k, v, False
        q, k = self.rotary_emb(positions, q.contiguous(), k.contiguous())
        return q, k, v.contiguous(), True


class LlamaDecoderLayer(nn.Module):
    def __init__(self, config: PretrainedConfig, layer_id: int, tp_rank: int, tp_size: int,
                 attention_cls: type[LlamaAttention] = LlamaAttention) -> None:
        super().__init__()
        self.self_attn = attention_cls(config, layer_id, tp_rank, tp_size)
        self.mlp = LlamaMLP(config, tp_rank, tp_size)
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, positions: torch.Tensor, hidden_states: torch.Tensor, forward_batch: "ForwardBatch",
                residual: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """The residual stream is carried un-normalised; each norm runs inside the projection after it."""
        hidden_states, residual = self.self_attn(positions, hidden_states, forward_batch, residual,
                                                 self.input_layernorm)
        return self.mlp(hidden_states, residual, self.post_attention_layernorm)

    def forward_last(self, positions: torch.Tensor, hidden_states: torch.Tensor, forward_batch: "ForwardBatch",
                     residual: Optional[torch.Tensor], last_index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`forward`'s rows at `last_index` only (every new token's K/V still go into the pool): attention
        output, o_proj and the MLP run on `bs` rows instead of one per new token."""
        hidden_states, residual = self.self_attn.forward_last(positions, hidden_states, forward_batch, residual,
                                                              self.input_layernorm, last_index)
        return self.mlp(hidden_states, residual, self.post_attention_layernorm)


class LlamaModel(nn.Module):
    def __init__(self, config: PretrainedConfig, tp_rank: int, tp_size: int,
                 attention_cls: type[LlamaAttention] = LlamaAttention) -> None:
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size, tp_rank, tp_size)
        self.layers = nn.ModuleList(LlamaDecoderLayer(config, i, tp_rank, tp_size, attention_cls)
                                    for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, forward_batch: "ForwardBatch",
                last_rows_only: bool = False) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """The last layer's (hidden_states, residual): `self.norm` of their sum is left to the logits
        processor, which folds it into the LM head. With `last_rows_only` (extend batches) the last layer
        returns each request's last new token's row only, the one its next-token logits read."""
        hidden_states, residual = self.embed_tokens(input_ids), None
        for layer in self.layers[:-1] if last_rows_only else self.layers:
            hidden_states, residual = layer(positions, hidden_states, forward_batch, residual)
        if last_rows_only:
            hidden_states, residual = self.layers[-1].forward_last(positions, hidden_states, forward_batch, residual,
                                                                   forward_batch.last_token_index())
        return hidden_states, residual


class LlamaForCausalLM(nn.Module):
    attention_cls: type[LlamaAttention] = LlamaAttention
    packed_modules_mapping = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}

    def __init__(self, config: PretrainedConfig, tp_rank: int = 0, tp_size: int = 1) -> None:
        super().__init__()
        self.config = config
        self.model = LlamaModel(config, tp_rank, tp_size, self.attention_cls)
        self.tie_word_embeddings = bool(getattr(config, "tie_word_embeddings", False))
        if self.tie_word_embeddings:
            self.lm_head = self.model.embed_tokens
        else:
            self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size, tp_rank, tp_size)
        self.logits_processor = LogitsProcessor(config.vocab_size)
        self.prune_last_layer = environ.prune_last_layer()  # RADIXLM_PRUNE_LAST_LAYER=0 turns it off

    @torch.no_grad()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
                forward_batch: "ForwardBatch") -> LogitsProcessorOutput:
        last_rows_only = self.skips_unread_rows(forward_batch)
        hidden_states, residual = self.model(input_ids, positions, forward_batch, last_rows_only)
        return self.logits_processor(input_ids, hidden_states, self.lm_head, forward_batch, residual, self.model.norm,
                                     last_rows_only=last_rows_only)

    def skips_unread_rows(self, forward_batch: "ForwardBatch") -> bool:
        """Whether the last layer may run its attention output, o_proj and MLP for each request's last new
        token only, the one row the logits read (every new token's K/V are still stored). Only where
        - `prune_last_layer` is on (RADIXLM_PRUNE_LAST_LAYER=0 turns it off, for A/B runs);
        - the batch is an extend (EXTEND or MIXED): in a decode every row is its request's last token, so
          there is nothing to skip, and the CUDA graphs (decode only) keep the path they captured;
        - no input-token logprobs are asked for: they read every new token's hidden state;
        - the attention backend implements `forward_extend_last` (flashinfer does not)."""
        return (self.prune_last_layer and forward_batch.forward_mode.is_extend() and not forward_batch.return_logprob
                and forward_batch.attn_backend.supports_extend_last)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load Hugging Face-named tensors; a tied checkpoint's `lm_head.weight` (if present) is skipped."""
        load_weights_into(self, weights, skip_prefixes=("lm_head.",) if self.tie_word_embeddings else ())


class MistralForCausalLM(LlamaForCausalLM):
    pass
