"""Tensor parallelism on the CPU (gloo, 2 real processes): collectives, and a TP=2 model equal to HF.

Each rank builds a ModelRunner holding its shard of a tiny Llama (one config with KV heads
split across ranks, one with a single KV head replicated on both) and must generate the
same greedy tokens as transformers.
"""

from __future__ import annotations

import socket

import torch
import torch.multiprocessing as mp
from transformers import AutoModelForCausalLM, LlamaConfig

PROMPTS = [[5, 9, 33, 100, 7, 12, 200, 3], [1, 2, 3], list(range(40, 90))]
NEW_TOKENS = 8


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _collectives(rank: int, port: int, results: dict) -> None:
    from radixlm import distributed as d

    d.init_distributed(rank, 2, "gloo", f"tcp://127.0.0.1:{port}")  # ModelRunner reuses this process group
    x = torch.full((2,), float(rank + 1))
    results[f"sum{rank}"] = d.tensor_model_parallel_all_reduce(x.clone()).tolist()
    results[f"gather{rank}"] = d.tensor_model_parallel_all_gather(x.view(1, 2), dim=-1).tolist()
    results[f"obj{rank}"] = d.broadcast_pyobj({"reqs": ["a", rank]} if rank == 0 else None)
    results[f"min{rank}"] = d.all_reduce_min_int(10 + rank)


def _rank_main(rank: int, port: int, folders: list[str], results: dict) -> None:
    """One process per rank: collectives first, then a TP=2 ModelRunner per model folder."""
    from radixlm import distributed as d
    from radixlm.model_executor.forward_batch_builder import generate_static_batch
    from radixlm.model_executor.model_runner import ModelRunner
    from radixlm.server_args import ServerArgs

    torch.set_num_threads(1)
    _collectives(rank, port, results)
    for i, folder in enumerate(folders):
        args = ServerArgs(model_path=folder, device="cpu", dtype="float32", max_total_tokens=1024, tp_size=2,
                          dist_init_addr=f"127.0.0.1:{port}").resolved()
        runner = ModelRunner(args, tp_rank=rank, tp_size=2)
        results[f"tokens{i}_{rank}"] = generate_static_batch(runner, PROMPTS, NEW_TOKENS)
    d.destroy_distributed()


def spawn(fn, *args: object) -> dict:
    results = mp.Manager().dict()
    mp.spawn(fn, args=(*args, results), nprocs=2, join=True)
    return dict(results)


def tiny_hf(kv_heads: int, folder: str) -> list[list[int]]:
    """Save a tiny Llama (KV heads split over 2 ranks, or 1 KV head replicated) and return HF greedy tokens."""
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=kv_heads,
                      num_hidden_layers=2, vocab_size=501, max_position_embeddings=256,
                      tie_word_embeddings=kv_heads == 1, architectures=["LlamaForCausalLM"])
    torch.manual_seed(3)
    hf = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    hf.save_pretrained(folder)
    return [hf.generate(torch.tensor([p]), do_sample=False, max_new_tokens=NEW_TOKENS, eos_token_id=None,
                        pad_token_id=0)[0, len(p):].tolist() for p in PROMPTS]


def test_collectives_and_tp2_models_match_hf(tmp_path) -> None:
    folders = [str(tmp_path / "kv2"), str(tmp_path / "kv1")]
    expected = [tiny_hf(2, folders[0]), tiny_hf(1, folders[1])]
    r = spawn(_rank_main, free_port(), folders)
    assert r["sum0"] == r["sum1"] == [3.0, 3.0]
    assert r["gather0"] == r["gather1"] == [[1.0, 1.0, 2.0, 2.0]]
    assert r["obj0"] == r["obj1"] == {"reqs": ["a", 0]}
    assert r["min0"] == r["min1"] == 10
    for i in range(2):
        assert r[f"tokens{i}_0"] == r[f"tokens{i}_1"] == expected[i], f"model {i}"
