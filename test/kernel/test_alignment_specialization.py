"""`radixlm_kernel.utils.jit_any_alignment`: the kernels launched outside CUDA graphs take per-request index
arrays as slices at any offset, and must compile one variant whatever those slices' alignment.

Triton's own binder (the code that builds a launch's specialization key) runs here for an sm_90 target on
CPU tensors, in a child process without TRITON_INTERPRET (this package's conftest sets it, and interpreted
kernels have no key). On an H100 each missing variant was a first-use compile of 0.2-1.6 s."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# kernel -> the index arrays it reads one element per program (what the server slices)
INDEX_ARGS = {
    "radixlm_kernel.rotary:_rotary_store_kernel": ["pos_ptr", "loc_ptr"],
    "radixlm_kernel.rotary:_rotary_kernel": ["pos_ptr"],
    "radixlm_kernel.kv_cache:_store_kv_kernel": ["loc_ptr"],
    "radixlm_kernel.extend_attention:_extend_kernel": ["req_pool_ptr", "seq_lens_ptr", "ext_lens_ptr",
                                                       "ext_start_ptr"],
    "radixlm_kernel.decode_attention:_decode_split_kernel": ["req_pool_ptr", "seq_lens_ptr", "splits_ptr",
                                                             "order_ptr", "pre_len_ptr", "n_pre_ptr", "loc_ptr"],
    "radixlm_kernel.decode_attention:_decode_merge_kernel": ["seq_lens_ptr", "splits_ptr", "pre_len_ptr",
                                                             "n_pre_ptr"],
}

CHILD = r"""
import importlib, json, sys
import torch
try:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature
    backend = make_backend(GPUTarget("cuda", 90, 32))
except Exception as e:  # Triton's internals moved: say so rather than pass
    print(json.dumps({"skip": f"Triton's binder is not reachable: {e!r}"}))
    sys.exit(0)

def key(kernel, sliced):
    base = torch.zeros(64, dtype=torch.int64)
    args = []
    for p in kernel.params:
        if p.is_constexpr:
            args.append(1)
        elif p.name.endswith("_ptr"):
            args.append(base[1:] if p.name in sliced else base)  # 8 bytes in: not 16-byte aligned
        else:
            args.append(64)
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    return repr(binder(*args)[1])

out = {}
for target, names in json.loads(sys.argv[1]).items():
    module, name = target.split(":")
    kernel = getattr(importlib.import_module(module), name)
    first_other = next(p.name for p in kernel.params if p.name.endswith("_ptr") and p.name not in names)
    out[target] = {"aligned": key(kernel, set()), "index_sliced": key(kernel, set(names)),
                   "other_sliced": key(kernel, {first_other}), "other": first_other}
print(json.dumps(out))
"""


def _keys() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    src = str(Path(__file__).resolve().parents[2] / "sgl-kernel")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(INDEX_ARGS)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if "skip" in result:
        pytest.skip(result["skip"])
    return result


def test_index_array_alignment_leaves_the_kernel_key_unchanged() -> None:
    keys = _keys()
    assert set(keys) == set(INDEX_ARGS)
    for target, k in keys.items():
        # sliced index arrays: the same variant as aligned ones
        assert k["index_sliced"] == k["aligned"], target
        # any other pointer still specialises on alignment (so the comparison above can fail)
        assert k["other_sliced"] != k["aligned"], (target, k["other"])


def test_jit_any_alignment_names_must_be_arguments() -> None:
    from radixlm_kernel.utils import jit_any_alignment

    def kernel(a_ptr, b_ptr):  # never compiled: the decorator rejects the name first
        pass

    with pytest.raises(ValueError, match=r"kernel has no arguments \['c_ptr'\]"):
        jit_any_alignment("a_ptr", "c_ptr")(kernel)
