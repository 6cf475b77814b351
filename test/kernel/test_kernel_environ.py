"""The RADIXLM_ variables the kernel package reads (radixlm_kernel/environ.py): unset, parsed, and a clear error
naming the variable for a bad value; and that a decode knob set in the environment reaches the kernel module."""

from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys

import pytest

from radixlm_kernel import environ

PACKAGE = pathlib.Path(environ.__file__).parent


def test_parse_decode_knobs() -> None:
    """RADIXLM_KERNEL_(FP8_)DECODE's value: four to six integers, else an error naming the variable."""
    assert environ.parse_decode_knobs("X", "64,2,3,0") == (64, 2, 3, False, 1, False)
    assert environ.parse_decode_knobs("X", "32,8,2,1,4") == (32, 8, 2, True, 4, False)
    assert environ.parse_decode_knobs("X", "64,2,3,1,1,1") == (64, 2, 3, True, 1, True)
    with pytest.raises(ValueError, match="RADIXLM_KERNEL_FP8_DECODE must be BLOCK_N,WARPS,STAGES,SWAP_AB"):
        environ.parse_decode_knobs("RADIXLM_KERNEL_FP8_DECODE", "64,2,3")


def test_parse_decode_small() -> None:
    """RADIXLM_KERNEL_DECODE_SMALL's value: MAX_BS then five integers, else an error naming the variable."""
    assert environ.parse_decode_small("4:64,4,3,0,1") == (4, (64, 4, 3, False, True))
    assert environ.parse_decode_small("16:128,4,2,0,0") == (16, (128, 4, 2, False, False))
    for bad in ("64,4,3,0,1", "4:64,4,3", "x:64,4,3,0,1", "4:0,4,3,0,1"):
        with pytest.raises(ValueError, match="RADIXLM_KERNEL_DECODE_SMALL must be MAX_BS:BLOCK_N"):
            environ.parse_decode_small(bad)


def test_parse_decode_occupancy() -> None:
    """RADIXLM_KERNEL_DECODE_OCCUPANCY's value: OCCUPANCY[,MAX_BS:OCC]..., else an error naming the variable."""
    assert environ.parse_decode_occupancy("2") == (2, ())
    assert environ.parse_decode_occupancy("2,16:3,4:2") == (2, ((4, 2), (16, 3)))
    for bad in ("", "0", "2,0:3", "2,4:0", "a,b", "2,4", "2,4:2:1"):
        with pytest.raises(ValueError, match="RADIXLM_KERNEL_DECODE_OCCUPANCY must be"):
            environ.parse_decode_occupancy(bad)


def test_decode_knob_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset or empty: None (the module's defaults stay); set: parsed; the fp8 and other pools read their own."""
    for name in ("KERNEL_DECODE", "KERNEL_FP8_DECODE", "KERNEL_DECODE_SMALL", "KERNEL_DECODE_OCCUPANCY"):
        monkeypatch.delenv(f"RADIXLM_{name}", raising=False)
    assert environ.decode_knobs(fp8=False) is None and environ.decode_knobs(fp8=True) is None
    assert environ.decode_small() is None and environ.decode_occupancy() is None
    monkeypatch.setenv("RADIXLM_KERNEL_DECODE", "")
    assert environ.decode_knobs(fp8=False) is None
    monkeypatch.setenv("RADIXLM_KERNEL_FP8_DECODE", "32,4,2,1")
    assert environ.decode_knobs(fp8=True) == (32, 4, 2, True, 1, False)
    assert environ.decode_knobs(fp8=False) is None
    monkeypatch.setenv("RADIXLM_KERNEL_DECODE", "64,2")
    with pytest.raises(ValueError, match="^RADIXLM_KERNEL_DECODE must be"):
        environ.decode_knobs(fp8=False)
    monkeypatch.setenv("RADIXLM_KERNEL_DECODE_SMALL", "8:128,4,2,0,1")
    assert environ.decode_small() == (8, (128, 4, 2, False, True))
    monkeypatch.setenv("RADIXLM_KERNEL_DECODE_OCCUPANCY", "3,8:5")
    assert environ.decode_occupancy() == (3, ((8, 5),))


def test_pdl_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RADIXLM_PDL", raising=False)
    assert environ.pdl_switch() is True
    for value, on in (("1", True), ("0", False), (" 0 ", False)):
        monkeypatch.setenv("RADIXLM_PDL", value)
        assert environ.pdl_switch() is on
    monkeypatch.setenv("RADIXLM_PDL", "false")
    with pytest.raises(ValueError, match="RADIXLM_PDL must be 0 or 1"):
        environ.pdl_switch()


def test_cuda_gemv_pdl(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RADIXLM_CUDA_GEMV_PDL", raising=False)
    assert environ.cuda_gemv_pdl(5) == 5
    monkeypatch.setenv("RADIXLM_CUDA_GEMV_PDL", " 2 ")
    assert environ.cuda_gemv_pdl(5) == 2
    for bad in ("on", "8", "-1"):
        monkeypatch.setenv("RADIXLM_CUDA_GEMV_PDL", bad)
        with pytest.raises(ValueError, match="RADIXLM_CUDA_GEMV_PDL must be an integer from 0 to 7"):
            environ.cuda_gemv_pdl(5)


def test_kernel_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    monkeypatch.setenv("RADIXLM_CACHE_DIR", str(tmp_path))
    assert environ.kernel_cache_dir() == str(tmp_path / "kernels")
    monkeypatch.delenv("RADIXLM_CACHE_DIR")
    assert environ.kernel_cache_dir() == os.path.join(os.path.expanduser("~"), ".cache", "radixlm", "kernels")


def test_env_knobs_reach_the_kernel_modules() -> None:
    """Set at import, the decode knobs replace the module defaults a launch reads (a fresh interpreter, since
    the modules read them once)."""
    env = dict(os.environ, RADIXLM_KERNEL_DECODE="32,8,2,1,2,1", RADIXLM_KERNEL_FP8_DECODE="16,4,4,0",
               RADIXLM_KERNEL_DECODE_SMALL="6:64,2,3,1,0", RADIXLM_KERNEL_DECODE_OCCUPANCY="5,12:7")
    code = ("from radixlm_kernel import decode_attention as d, decode_splits as s; "
            "print((d.BLOCK_N, d.NUM_WARPS, d.NUM_STAGES, d.SWAP_AB, d.KV_HEADS, d.SLOTS_AHEAD), "
            "(d.FP8_BLOCK_N, d.FP8_NUM_WARPS, d.FP8_NUM_STAGES, d.FP8_SWAP_AB), d.SMALL_BS[False], "
            "d._launch_knobs(False, 6), d._launch_knobs(False, 7), s.occupancy_for(12), s.occupancy_for(13))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == ("(32, 8, 2, True, 2, True) (16, 4, 4, False) 6 (64, 2, 3, True, False) "
                           "(32, 8, 2, True, True) 7 5")


def test_bad_env_knob_fails_the_import_naming_it() -> None:
    env = dict(os.environ, RADIXLM_KERNEL_DECODE_OCCUPANCY="two")
    run = subprocess.run([sys.executable, "-c", "import radixlm_kernel.decode_splits"], env=env,
                         capture_output=True, text=True)
    assert run.returncode != 0
    assert "RADIXLM_KERNEL_DECODE_OCCUPANCY must be" in run.stderr


def test_only_environ_reads_the_environment() -> None:
    """The style rule: one module of the package reads environment variables."""
    readers = []
    for path in sorted(PACKAGE.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv") and \
                    isinstance(node.value, ast.Name) and node.value.id == "os":
                readers.append(path.name)
    assert readers and set(readers) == {"environ.py"}
