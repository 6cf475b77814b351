"""Pure-torch references for every kernel: the semantics the Triton kernels are tested against.

They compute in float32 and cast back to the input dtype where the kernel does (for the norm,
SiLU-and-mul and rotary: where Hugging Face's bf16 modules round), so a kernel and its reference
agree to rounding. None of them is meant to be fast.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F


def rmsnorm_ref(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    h = x.float()
    h = (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return (h.float() * weight.float()).to(x.dtype)


def fused_add_rmsnorm_ref(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    """In place: `residual += x` (rounded to residual's dtype), then `x = rmsnorm(residual) * weight`."""
    residual.copy_((x.float() + residual.float()).to(residual.dtype))
    x.copy_(rmsnorm_ref(residual, weight, eps).to(x.dtype))


def silu_and_mul_ref(x: torch.Tensor) -> torch.Tensor:
    gate, up = x.float().chunk(2, dim=-1)
    return (F.silu(gate).to(x.dtype).float() * up).to(x.dtype)


def linear_gemv_ref(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None,
             out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    y = F.linear(x.float(), weight.float(), None if bias is None else bias.float())
    return y.to(out_dtype or x.dtype)


def rmsnorm_gemv_ref(x: torch.Tensor, residual: Optional[torch.Tensor], norm_weight: torch.Tensor, eps: float,
                     weight: torch.Tensor, bias: Optional[torch.Tensor] = None,
                     out_dtype: Optional[torch.dtype] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """`(gemv(rmsnorm(h) * norm_weight), h)` with `h = x + residual` rounded to residual's dtype (or x);
    the normalised input stays float32 (the kernel does not round it)."""
    h = x if residual is None else (x.float() + residual.float()).to(residual.dtype)
    hf = h.float()
    normed = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps) * norm_weight.float()
    return linear_gemv_ref(normed, weight, bias).to(out_dtype or x.dtype), h


def silu_mul_gemv_ref(gate_up: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None,
                      out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    gate, up = gate_up.float().chunk(2, dim=-1)
    return linear_gemv_ref(F.silu(gate) * up, weight, bias).to(out_dtype or gate_up.dtype)


def apply_rotary_pos_emb_ref_(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, head_size: int,
                              cos_sin_cache: torch.Tensor, is_neox: bool) -> None:
    cos, sin = cos_sin_cache.index_select(0, positions.long()).float().chunk(2, dim=-1)
    for x in (q, k):
        x.copy_(_rotate_ref(x, cos, sin, head_size, is_neox))


def _rotate_ref(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, head_size: int, is_neox: bool) -> torch.Tensor:
    rotary_dim = cos.shape[-1] * 2
    h = x.float().reshape(x.shape[0], -1, head_size)
    rot, rest = h[..., :rotary_dim], h[..., rotary_dim:]

    def r(t: torch.Tensor) -> torch.Tensor:  # rounded to x's dtype and back
        return t.to(x.dtype).float()

    cos, sin = r(cos.unsqueeze(1)), r(sin.unsqueeze(1))
    if is_neox:
        x1, x2 = rot.chunk(2, dim=-1)
        rot = torch.cat((r(x1 * cos) - r(x2 * sin), r(x2 * cos) + r(x1 * sin)), dim=-1)
    else:
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
        rot = torch.stack((r(x1 * cos) - r(x2 * sin), r(x2 * cos) + r(x1 * sin)), dim=-1).flatten(-2)
    return torch.cat((rot, rest), dim=-1).reshape(x.shape).to(x.dtype)


def apply_rotary_pos_emb_and_store_kv_ref_(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                                           v: torch.Tensor, head_size: int, cos_sin_cache: torch.Tensor,
                                           is_neox: bool, k_buffer: torch.Tensor, v_buffer: torch.Tensor,
                                           loc: torch.Tensor) -> None:
    apply_rotary_pos_emb_ref_(positions, q, k, head_size, cos_sin_cache, is_neox)
    store_kv_cache_ref(k_buffer, v_buffer, loc, k.reshape(k.shape[0], *k_buffer.shape[1:]),
                       v.reshape(v.shape[0], *v_buffer.shape[1:]))


def store_kv_cache_ref(k_buffer: torch.Tensor, v_buffer: torch.Tensor, loc: torch.Tensor, k: torch.Tensor,
                       v: torch.Tensor) -> None:
    k_buffer[loc.long()] = k.to(k_buffer.dtype)
    v_buffer[loc.long()] = v.to(v_buffer.dtype)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, sm_scale: float) -> torch.Tensor:
    """q `[M, Hq, D]`, k/v `[N, Hk, D]`, mask `[M, N]` (True = attend) -> `[M, Hq, Dv]` in float32."""
    group = q.shape[1] // k.shape[1]
    k = k.float().repeat_interleave(group, dim=1)
    v = v.float().repeat_interleave(group, dim=1)
    scores = torch.einsum("mhd,nhd->hmn", q.float(), k) * sm_scale
    scores = scores.masked_fill(~mask.unsqueeze(0), float("-inf"))
    return torch.einsum("hmn,nhd->mhd", torch.softmax(scores, dim=-1), v)


def decode_attention_ref(q: torch.Tensor, k_buffer: torch.Tensor, v_buffer: torch.Tensor, o: torch.Tensor,
                         req_to_token: torch.Tensor, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor,
                         sm_scale: float) -> None:
    """q `[bs, Hq, D]`; each request attends to its `seq_lens[i]` slots from `req_to_token`; writes o `[bs, Hq, Dv]`."""
    for i in range(q.shape[0]):
        slots = req_to_token[req_pool_indices[i], :int(seq_lens[i])].long()
        mask = torch.ones(1, slots.numel(), dtype=torch.bool, device=q.device)
        o[i] = _attend(q[i:i + 1], k_buffer[slots], v_buffer[slots], mask, sm_scale)[0].to(o.dtype)


def extend_attention_ref(q_extend: torch.Tensor, k_extend: torch.Tensor, v_extend: torch.Tensor,
                         o_extend: torch.Tensor, k_buffer: torch.Tensor, v_buffer: torch.Tensor,
                         req_to_token: torch.Tensor, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor,
                         extend_seq_lens: torch.Tensor, extend_start_loc: torch.Tensor, sm_scale: float) -> None:
    """New tokens attend to the cached prefix (slots from req_to_token) and causally to each other."""
    for i in range(seq_lens.shape[0]):
        ext, start = int(extend_seq_lens[i]), int(extend_start_loc[i])
        prefix = int(seq_lens[i]) - ext
        if ext == 0:
            continue
        slots = req_to_token[req_pool_indices[i], :prefix].long()
        k = torch.cat((k_buffer[slots].to(k_extend.dtype), k_extend[start:start + ext]))
        v = torch.cat((v_buffer[slots].to(v_extend.dtype), v_extend[start:start + ext]))
        rows = torch.arange(prefix, prefix + ext, device=q_extend.device)
        mask = torch.arange(prefix + ext, device=q_extend.device).unsqueeze(0) <= rows.unsqueeze(1)
        o_extend[start:start + ext] = _attend(q_extend[start:start + ext], k, v, mask, sm_scale).to(o_extend.dtype)


def argmax_ref(logits: torch.Tensor) -> torch.Tensor:
    """int64 [bs]: each row's first maximum (NaN above every number), as greedy decoding picks it."""
    return torch.argmax(logits, dim=-1)


# ---- seeded sampling ----------------------------------------------------------------------

def _signed64(x: int) -> int:
    return x - (1 << 64) if x >= (1 << 63) else x


SPLITMIX_GOLDEN = 0x9E3779B97F4A7C15
SPLITMIX_MIX1 = 0xBF58476D1CE4E5B9
SPLITMIX_MIX2 = 0x94D049BB133111EB


def _shift_right(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift on int64 (torch's `>>` is arithmetic)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def splitmix64_ref(x: torch.Tensor) -> torch.Tensor:
    z = x + _signed64(SPLITMIX_GOLDEN)
    z = (z ^ _shift_right(z, 30)) * _signed64(SPLITMIX_MIX1)
    z = (z ^ _shift_right(z, 27)) * _signed64(SPLITMIX_MIX2)
    return z ^ _shift_right(z, 31)


def uniform_noise_ref(seeds: torch.Tensor, steps: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """u[i, t] strictly inside (0, 1): row = sm(sm(seed) ^ step); u = ((sm(row ^ sm(t)) >>> 41) + 0.5) / 2**23.

    23 bits, not 24: (2**24 - 1) + 0.5 is not a float32 and rounds up to 2**24, giving u == 1.0,
    -log(u) == 0 and an infinite (or, for a filtered token, NaN) race that argmax would pick."""
    row = splitmix64_ref(splitmix64_ref(seeds.long()) ^ steps.long())
    token = torch.arange(vocab_size, dtype=torch.int64, device=seeds.device)
    h = splitmix64_ref(row.unsqueeze(1) ^ splitmix64_ref(token).unsqueeze(0))
    return (_shift_right(h, 41).float() + 0.5) * (1.0 / (1 << 23))


def top_k_top_p_min_p_filter_ref(probs: torch.Tensor, top_ks: torch.Tensor, top_ps: torch.Tensor,
                                 min_ps: torch.Tensor) -> torch.Tensor:
    """Zero tokens outside top-k (k <= 0 or >= vocab: off), outside the top-p nucleus (p >= 1: off)
    or below min_p * max prob. The nucleus keeps a token when the mass strictly before it is <= top_p."""
    vocab = probs.shape[-1]
    sorted_probs, order = probs.float().sort(dim=-1, descending=True)
    rank = torch.arange(vocab, device=probs.device).unsqueeze(0)
    k = top_ks.long().view(-1, 1)
    drop = rank >= torch.where((k > 0) & (k < vocab), k, vocab)
    mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
    drop |= (mass_before > top_ps.float().view(-1, 1)) & (top_ps.float().view(-1, 1) < 1.0)
    drop |= sorted_probs < min_ps.float().view(-1, 1) * sorted_probs[:, :1]
    return torch.zeros_like(sorted_probs).scatter(1, order, sorted_probs.masked_fill(drop, 0.0))


def top_k_top_p_min_p_sampling_ref(probs: torch.Tensor, top_ks: torch.Tensor, top_ps: torch.Tensor,
                                   min_ps: torch.Tensor, seeds: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """int64 [bs]: argmax(filtered_p / -log(u)) with u from `uniform_noise_ref` (the exponential race)."""
    kept = top_k_top_p_min_p_filter_ref(probs, top_ks, top_ps, min_ps)
    race = kept / -torch.log(uniform_noise_ref(seeds, steps, probs.shape[-1]))
    return torch.argmax(race, dim=-1)
