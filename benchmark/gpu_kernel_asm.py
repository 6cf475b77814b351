"""What the compiler made of the decode-attention kernel (CUDA only): per launch config, registers,
spills, shared memory, the occupancy they allow, and counts of the instructions that say whether
the K/V loads are pipelined (cp.async) and how fp8 tiles are converted and fed to the MMAs.

    python benchmark/gpu_kernel_asm.py            # bf16 and fp8_e4m3 pools, the default knobs and a few others

Diagnostic only: it prints, it does not time (the sweep, `gpu_kernel_sweep.py`, times).
"""

from __future__ import annotations

import argparse
import re

import torch

import radixlm_kernel as K
from radixlm_kernel import decode_attention as dec

HQ, HKV, D = 32, 8, 128
PTX_OPS = ["cp.async.cg", "cp.async.ca", "cp.async.wait_group", "ld.global", "ld.shared", "st.shared", "ldmatrix",
           "cvt.rn.f16x2.e4m3x2", "cvt", "mma.sync", "wgmma", "ex2.approx", "bar.sync", "shfl.sync"]
SASS_OPS = ["LDGSTS", "LDG", "LDS", "STS", "LDSM", "F2FP", "HMMA", "MUFU.EX2", "BAR", "SHFL", "LDL", "STL"]
KNOBS = {True: ("FP8_BLOCK_N", "FP8_NUM_WARPS", "FP8_NUM_STAGES", "FP8_SWAP_AB"),
         False: ("BLOCK_N", "NUM_WARPS", "NUM_STAGES", "SWAP_AB")}


def compiled_kernels() -> list:
    """Every compiled variant of the decode split kernel so far."""
    out = []
    for caches in dec._decode_split_kernel.device_caches.values():
        out.extend(caches[0].values())
    return out


def count(text: str, ops: list[str]) -> dict[str, int]:
    return {op: len(re.findall(r"(?<![\w.])" + re.escape(op) + r"(?![\w])", text)) for op in ops}


def occupancy(kernel, warps: int) -> int:
    props = torch.cuda.get_device_properties(0)
    regs = max(1, kernel.n_regs) * 32 * warps
    by_regs = 65536 // regs
    shared = kernel.metadata.shared
    by_smem = (228 * 1024) // shared if shared else 32
    return min(by_regs, by_smem, 2048 // (32 * warps), props.max_threads_per_multi_processor // (32 * warps))


def describe(fp8: bool, cfg: tuple, bs: int, ctx: int, dump: str | None) -> None:
    for name, value in zip(KNOBS[fp8], cfg):
        setattr(dec, name, value)
    dtype = torch.float8_e4m3fn if fp8 else torch.bfloat16
    total = bs * ctx + 1
    kb = torch.randn(total, HKV, D, device="cuda").to(dtype)
    vb = torch.randn(total, HKV, D, device="cuda").to(dtype)
    r2t = torch.arange(1, total, device="cuda", dtype=torch.int32).view(bs, ctx)
    rows = torch.arange(bs, device="cuda")
    lens = torch.full((bs,), ctx, device="cuda")
    q = torch.randn(bs, HQ, D, device="cuda", dtype=torch.bfloat16)
    o = torch.empty_like(q)
    before = {id(k) for k in compiled_kernels()}
    grid = K.grid_kv_splits(bs, HKV, 32, 132)
    splits = K.compute_num_kv_splits(lens, HKV, 32, 132)
    K.decode_attention_fwd(q, kb, vb, o, r2t, rows, lens, splits, D ** -0.5, grid)
    torch.cuda.synchronize()
    new = [k for k in compiled_kernels() if id(k) not in before]
    for kernel in new:
        warps = kernel.metadata.num_warps
        print(f"## {'fp8' if fp8 else 'bf16'} {cfg} bs {bs} x {ctx}: regs {kernel.n_regs}, spills {kernel.n_spills}, "
              f"shared {kernel.metadata.shared} B, warps {warps}, programs per SM <= {occupancy(kernel, warps)}")
        ptx = kernel.asm.get("ptx", "")
        print("   ptx:", {k: v for k, v in count(ptx, PTX_OPS).items() if v})
        try:
            sass = kernel.asm["sass"]
            print("   sass:", {k: v for k, v in count(sass, SASS_OPS).items() if v})
        except Exception as e:  # noqa: BLE001 - nvdisasm may be missing
            print(f"   sass: unavailable ({type(e).__name__})")
        ttgir = kernel.asm.get("ttgir", "")
        if dump:
            tag = f"{'fp8' if fp8 else 'bf16'}_{'_'.join(str(int(c)) for c in cfg)}"
            for ext in ("ttgir", "ptx", "sass"):
                try:
                    with open(f"{dump}/{tag}.{ext}", "w") as f:
                        f.write(kernel.asm[ext])
                except Exception:  # noqa: BLE001 - sass may be unavailable
                    pass
        print("   ttgir:", {op: ttgir.count(op) for op in ("async_copy_global_to_local", "local_load",
                                                          "convert_layout", "tt.dot", "warp_group_dot", "fp_to_fp")
                            if ttgir.count(op)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bs", type=int, default=256)
    parser.add_argument("--ctx", type=int, default=2048)
    parser.add_argument("--dump", default=None, help="a folder to write each variant's ttgir, ptx and sass into")
    args = parser.parse_args()
    for fp8, cfg in ((True, (64, 4, 3, True)), (True, (64, 2, 3, False)), (True, (128, 4, 3, True)),
                     (False, (64, 2, 3, False)), (False, (64, 4, 3, False))):
        describe(fp8, cfg, args.bs, args.ctx, args.dump)


if __name__ == "__main__":
    main()
