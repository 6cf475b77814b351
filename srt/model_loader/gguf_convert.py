"""Convert a GGUF file once into a cached Hugging Face folder (fp32 safetensors).

The folder holds config.json, generation_config.json, the tokenizer (tokenizer.json,
tokenizer_config.json with the chat template) and model.safetensors with HF parameter
names, so radixlm and `transformers.AutoModelForCausalLM.from_pretrained(folder)` both load
it. Weights are dequantized with `gguf` directly (seconds), not through transformers.

Concurrency: processes that convert the same file serialize on a lock file; the folder is
written under a temporary name and renamed into place, so a reader never sees half of it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any, Iterator

import gguf
import numpy as np
import torch

from radixlm import environ

logger = logging.getLogger(__name__)

# Bump when the converted folder's layout or contents change, to invalidate old caches.
CONVERTER_VERSION = 1


@dataclass(frozen=True)
class GGUFArch:
    """How one GGUF `general.architecture` maps onto a Hugging Face model."""

    model_type: str
    architecture: str
    permute_qk: bool  # llama.cpp permutes q/k rows for its rotary layout (llama only)


GGUF_ARCHS: dict[str, GGUFArch] = {
    "llama": GGUFArch("llama", "LlamaForCausalLM", permute_qk=True),
    "qwen2": GGUFArch("qwen2", "Qwen2ForCausalLM", permute_qk=False),
    "qwen3": GGUFArch("qwen3", "Qwen3ForCausalLM", permute_qk=False),
}

_GLOBAL_TENSORS = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}
_LAYER_TENSORS = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
# Tensors llama.cpp derives at conversion time that have no HF parameter.
_SKIPPED_TENSORS = {"rope_freqs.weight"}


# ---- cache location -----------------------------------------------------------------


def converted_dir_for(gguf_path: str) -> str:
    """The cache folder for this GGUF: <cache_dir>/<stem>-<hash of size, mtime, version>."""
    st = os.stat(gguf_path)
    key = f"{st.st_size}-{st.st_mtime_ns}-v{CONVERTER_VERSION}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    stem = os.path.splitext(os.path.basename(gguf_path))[0]
    return os.path.join(environ.cache_dir(), f"{stem}-{digest}")


def convert_gguf(gguf_path: str) -> str:
    """Return the converted folder for `gguf_path`, converting it first if not cached."""
    if not os.path.isfile(gguf_path):
        raise FileNotFoundError(f"GGUF file not found: {gguf_path}")
    final = converted_dir_for(gguf_path)
    if _is_complete(final):
        return final
    os.makedirs(os.path.dirname(final), exist_ok=True)
    with _exclusive_lock(final + ".lock"):
        if _is_complete(final):  # another process finished while we waited
            return final
        tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(final)}.tmp-", dir=os.path.dirname(final))
        try:
            write_hf_folder(gguf_path, tmp)
            _make_readable(tmp)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return final


def _is_complete(folder: str) -> bool:
    # The folder only ever appears through an atomic rename of a finished one.
    return os.path.isfile(os.path.join(folder, "config.json"))


def _make_readable(folder: str) -> None:
    # mkdtemp and safetensors create owner-only entries; the cache is shared like ~/.cache.
    os.chmod(folder, 0o755)
    for name in os.listdir(folder):
        os.chmod(os.path.join(folder, name), 0o644)


@contextlib.contextmanager
def _exclusive_lock(path: str) -> Iterator[None]:
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


# ---- conversion ---------------------------------------------------------------------


def write_hf_folder(gguf_path: str, out_dir: str) -> None:
    """Write config, generation config, tokenizer and fp32 safetensors into `out_dir`."""
    from safetensors.torch import save_file

    reader = gguf.GGUFReader(gguf_path)
    arch_name = str(_field(reader, "general.architecture"))
    arch = GGUF_ARCHS.get(arch_name)
    if arch is None:
        raise ValueError(f"GGUF architecture {arch_name!r} in {gguf_path} is not supported "
                         f"(supported: {sorted(GGUF_ARCHS)})")
    names = {t.name for t in reader.tensors}
    config = build_hf_config(reader, arch_name, arch, names)
    tensors = dict(convert_tensors(reader, config, arch))
    save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(out_dir)
    _generation_config(config).save_pretrained(out_dir)
    export_tokenizer(gguf_path, out_dir, chat_template=_field(reader, "tokenizer.chat_template"))


def build_hf_config(reader: gguf.GGUFReader, arch_name: str, arch: GGUFArch, tensor_names: set[str]) -> Any:
    """A transformers PretrainedConfig built from the GGUF metadata."""
    from transformers import AutoConfig

    def meta(key: str, default: Any = None) -> Any:
        return _field(reader, f"{arch_name}.{key}", default)

    heads = int(meta("attention.head_count"))
    hidden = int(meta("embedding_length"))
    vocab = _tensor_rows(reader, "token_embd.weight")
    kwargs: dict[str, Any] = dict(
        architectures=[arch.architecture],
        hidden_size=hidden,
        intermediate_size=int(meta("feed_forward_length")),
        num_hidden_layers=int(meta("block_count")),
        num_attention_heads=heads,
        num_key_value_heads=int(meta("attention.head_count_kv", heads)),
        head_dim=int(meta("attention.key_length", hidden // heads)),
        max_position_embeddings=int(meta("context_length")),
        rms_norm_eps=float(meta("attention.layer_norm_rms_epsilon")),
        rope_theta=float(meta("rope.freq_base", 10000.0)),
        vocab_size=vocab,
        tie_word_embeddings="output.weight" not in tensor_names,
        bos_token_id=_field(reader, "tokenizer.ggml.bos_token_id"),
        eos_token_id=_field(reader, "tokenizer.ggml.eos_token_id"),
        pad_token_id=_field(reader, "tokenizer.ggml.padding_token_id"),
        dtype="float32",
    )
    if arch.model_type == "llama":
        kwargs["attention_bias"] = "blk.0.attn_q.bias" in tensor_names
    scaling = _rope_scaling(meta("rope.scaling.type"), meta("rope.scaling.factor"))
    if scaling is not None:
        kwargs["rope_scaling"] = scaling
    return AutoConfig.for_model(arch.model_type, **kwargs)


def _rope_scaling(kind: Any, factor: Any) -> dict | None:
    if kind in (None, "none") or factor in (None, 1.0):
        return None
    if kind != "linear":
        raise NotImplementedError(f"GGUF rope scaling {kind!r} is not supported (only 'linear')")
    return {"rope_type": "linear", "factor": float(factor)}


def _generation_config(config: Any) -> Any:
    from transformers import GenerationConfig

    return GenerationConfig(bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id,
                            pad_token_id=config.pad_token_id)


def convert_tensors(reader: gguf.GGUFReader, config: Any, arch: GGUFArch) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield (HF name, fp32 tensor) for every GGUF tensor, q/k un-permuted where needed."""
    for t in reader.tensors:
        if t.name in _SKIPPED_TENSORS:
            logger.warning("Ignoring GGUF tensor %s (no Hugging Face equivalent)", t.name)
            continue
        name = hf_tensor_name(t.name)
        values = gguf.quants.dequantize(t.data, t.tensor_type)
        shape = tuple(reversed([int(d) for d in t.shape]))  # GGUF lists dims innermost first
        tensor = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32).reshape(shape).copy())
        if arch.permute_qk and name.endswith(("q_proj.weight", "q_proj.bias")):
            tensor = unpermute_rotary(tensor, config.num_attention_heads)
        elif arch.permute_qk and name.endswith(("k_proj.weight", "k_proj.bias")):
            tensor = unpermute_rotary(tensor, config.num_key_value_heads)
        yield name, tensor


def hf_tensor_name(gguf_name: str) -> str:
    """`blk.3.attn_q.weight` -> `model.layers.3.self_attn.q_proj.weight`; ValueError if unknown."""
    parts = gguf_name.split(".")
    base, suffix = ".".join(parts[:-1]), parts[-1]
    if base in _GLOBAL_TENSORS:
        return f"{_GLOBAL_TENSORS[base]}.{suffix}"
    if len(parts) == 4 and parts[0] == "blk" and parts[2] in _LAYER_TENSORS:
        return f"model.layers.{parts[1]}.{_LAYER_TENSORS[parts[2]]}.{suffix}"
    raise ValueError(f"GGUF tensor {gguf_name!r} has no known Hugging Face name")


def unpermute_rotary(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """Undo llama.cpp's q/k row permutation.

    llama.cpp stores each head's rows as interleaved pairs (GPT-J rotary layout), produced by
    viewing HF rows as [heads, 2, head_dim/2] and swapping the last two axes. Viewing the
    stored rows as [heads, head_dim/2, 2] and swapping back restores the HF (NeoX) halves.
    """
    rest = w.shape[1:]
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *rest).transpose(1, 2).reshape(w.shape)


# ---- tokenizer ----------------------------------------------------------------------


def export_tokenizer(gguf_path: str, out_dir: str, chat_template: str | None) -> None:
    """Build the HF tokenizer from the GGUF's vocabulary and save it with its chat template."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(os.path.dirname(os.path.abspath(gguf_path)),
                                        gguf_file=os.path.basename(gguf_path))
    if chat_template and not tok.chat_template:
        tok.chat_template = chat_template
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.save_pretrained(out_dir)
    _add_chat_template_to_config(out_dir, tok.chat_template)


def _add_chat_template_to_config(out_dir: str, chat_template: str | None) -> None:
    # transformers 5 saves the template as chat_template.jinja; older readers (and other
    # tools) look for it in tokenizer_config.json, so keep a copy there as well.
    if not chat_template:
        return
    path = os.path.join(out_dir, "tokenizer_config.json")
    with open(path) as f:
        data = json.load(f)
    data["chat_template"] = chat_template
    with open(path, "w") as f:
        json.dump(data, f, indent=2, ensure_ascii=False)


# ---- metadata helpers ---------------------------------------------------------------


def _field(reader: gguf.GGUFReader, key: str, default: Any = None) -> Any:
    field = reader.get_field(key)
    return default if field is None else field.contents()


def _tensor_rows(reader: gguf.GGUFReader, name: str) -> int:
    for t in reader.tensors:
        if t.name == name:
            return int(t.shape[-1])  # outermost dim is listed last
    raise ValueError(f"GGUF file has no tensor {name!r}")
