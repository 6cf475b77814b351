"""The RADIXLM_ switches read in radixlm/environ.py: defaults, values, and a clear error for a bad one."""

from __future__ import annotations

import pytest

from radixlm import environ


ON_BY_DEFAULT = {"DECODE_CASCADE": environ.decode_cascade, "DECODE_FUSED_ROPE": environ.decode_fused_rope,
                 "PRUNE_LAST_LAYER": environ.prune_last_layer, "PREFILL_BESIDE_DECODE": environ.prefill_beside_decode,
                 "LAG_FOR_FREES": environ.lag_for_frees}


@pytest.mark.parametrize("name", list(ON_BY_DEFAULT))
def test_switches_on_by_default_and_off_with_0(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.delenv(f"RADIXLM_{name}", raising=False)
    assert ON_BY_DEFAULT[name]() is True
    monkeypatch.setenv(f"RADIXLM_{name}", "0")
    assert ON_BY_DEFAULT[name]() is False


def test_fused_gemv_max_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RADIXLM_FUSED_GEMV_MAX_TOKENS", raising=False)
    assert environ.fused_gemv_max_tokens(0) == 0
    monkeypatch.setenv("RADIXLM_FUSED_GEMV_MAX_TOKENS", "8")
    assert environ.fused_gemv_max_tokens(0) == 8
    monkeypatch.setenv("RADIXLM_FUSED_GEMV_MAX_TOKENS", "eight")
    with pytest.raises(ValueError, match="RADIXLM_FUSED_GEMV_MAX_TOKENS must be an integer"):
        environ.fused_gemv_max_tokens(0)


def test_cuda_gemv_max_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RADIXLM_CUDA_GEMV_MAX_TOKENS", raising=False)
    assert environ.cuda_gemv_max_tokens(0) == 0
    monkeypatch.setenv("RADIXLM_CUDA_GEMV_MAX_TOKENS", "1")
    assert environ.cuda_gemv_max_tokens(0) == 1
    for bad in ("one", "9", "-1"):
        monkeypatch.setenv("RADIXLM_CUDA_GEMV_MAX_TOKENS", bad)
        with pytest.raises(ValueError, match=f"RADIXLM_CUDA_GEMV_MAX_TOKENS must be an integer from 0 .* got '{bad}'"):
            environ.cuda_gemv_max_tokens(0)


def test_cuda_gemv_ops(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RADIXLM_CUDA_GEMV_OPS", raising=False)
    assert environ.cuda_gemv_ops("qkv,lm_head") == {"qkv", "lm_head"}
    monkeypatch.setenv("RADIXLM_CUDA_GEMV_OPS", " o_proj, qkv ")
    assert environ.cuda_gemv_ops("qkv") == {"o_proj", "qkv"}
    monkeypatch.setenv("RADIXLM_CUDA_GEMV_OPS", "")
    assert environ.cuda_gemv_ops("qkv") == frozenset()
    monkeypatch.setenv("RADIXLM_CUDA_GEMV_OPS", "qkv,mlp")
    with pytest.raises(ValueError, match=r"RADIXLM_CUDA_GEMV_OPS .* unknown \['mlp'\]"):
        environ.cuda_gemv_ops("qkv")


def test_step_trace_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RADIXLM_STEP_TRACE", raising=False)
    assert environ.step_trace_path() is None
    monkeypatch.setenv("RADIXLM_STEP_TRACE", "")
    assert environ.step_trace_path() is None
    monkeypatch.setenv("RADIXLM_STEP_TRACE", "/tmp/trace.jsonl")
    assert environ.step_trace_path() == "/tmp/trace.jsonl"


def test_step_trace_unwritable_path_names_the_variable(tmp_path) -> None:
    import torch

    from radixlm.managers.step_trace import open_step_trace

    assert open_step_trace(None, torch.device("cpu")) is None
    with pytest.raises(ValueError, match="RADIXLM_STEP_TRACE='.*missing/trace.jsonl' cannot be opened"):
        open_step_trace(str(tmp_path / "missing" / "trace.jsonl"), torch.device("cpu"))
    trace = open_step_trace(str(tmp_path / "trace.jsonl"), torch.device("cpu"))
    trace.record("decode", 2, 2, 0.001, 0.002, 0.0005, None)
    assert '"kind": "decode"' in (tmp_path / "trace.jsonl").read_text()


def test_uvicorn_loop_http(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RADIXLM_UVICORN", raising=False)
    assert environ.uvicorn_loop_http() == ("auto", "auto")
    monkeypatch.setenv("RADIXLM_UVICORN", "asyncio,h11")
    assert environ.uvicorn_loop_http() == ("asyncio", "h11")
    for bad in ("asyncio", "trio,h11", "uvloop,h2"):
        monkeypatch.setenv("RADIXLM_UVICORN", bad)
        with pytest.raises(ValueError, match="RADIXLM_UVICORN must be LOOP,HTTP"):
            environ.uvicorn_loop_http()


def test_hop_trace_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RADIXLM_HOP_TRACE", raising=False)
    assert environ.hop_trace_path() is None
    monkeypatch.setenv("RADIXLM_HOP_TRACE", "/tmp/hops.log")
    assert environ.hop_trace_path() == "/tmp/hops.log"


def test_decode_pacing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RADIXLM_DECODE_PACING", raising=False)
    assert environ.decode_pacing() == ("off", 0.0)
    monkeypatch.setenv("RADIXLM_DECODE_PACING", "auto")
    assert environ.decode_pacing() == ("auto", 0.0005)
    monkeypatch.setenv("RADIXLM_DECODE_PACING", "off")
    assert environ.decode_pacing() == ("off", 0.0)
    monkeypatch.setenv("RADIXLM_DECODE_PACING", "1.5")
    assert environ.decode_pacing() == ("on", 0.0015)
    for bad in ("-1", "fast", "nan"):
        monkeypatch.setenv("RADIXLM_DECODE_PACING", bad)
        with pytest.raises(ValueError, match="RADIXLM_DECODE_PACING must be a margin"):
            environ.decode_pacing()


def test_mp_start_method(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RADIXLM_MP_START_METHOD", raising=False)
    monkeypatch.setattr(environ.sys, "platform", "linux")
    assert environ.mp_start_method("cpu") == "forkserver"
    assert environ.mp_start_method("cuda") == "spawn"
    monkeypatch.setattr(environ.sys, "platform", "darwin")
    assert environ.mp_start_method("cpu") == "spawn"
    monkeypatch.setenv("RADIXLM_MP_START_METHOD", "spawn")
    assert environ.mp_start_method("cpu") == "spawn"
    monkeypatch.setenv("RADIXLM_MP_START_METHOD", "forkserver")
    assert environ.mp_start_method("cpu") == "forkserver"
    with pytest.raises(ValueError, match="forkserver works on the CPU only"):
        environ.mp_start_method("cuda")
    monkeypatch.setenv("RADIXLM_MP_START_METHOD", "fork")
    with pytest.raises(ValueError, match="RADIXLM_MP_START_METHOD must be 'spawn' or 'forkserver'"):
        environ.mp_start_method("cpu")
