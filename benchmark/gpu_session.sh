#!/usr/bin/env bash
# One device call on an H200: install, then the checks and timings named as arguments.
#   bash benchmark/gpu_session.sh parity one_batch offline_hf offline_ci shared_prefix kernels
#   this session's (RESULTS.md, third session): gemv_sweep sweep_shared kernels | kernels_new one_batch
#     shared_prefix shared_prefix_nocascade profile | offline_ci online offline_ci_fp8 parity | kernels
#   fifteenth session: GEMV_PDL_CFGS="cublas pdl_off mode1 mode2 mode3" gemv_pdl_ab cuda_gemv_tests |
#     GEMV_PDL_CFGS="cublas default" gemv_pdl_ab one_batch_small one_batch_cublas cuda_gemv_tests pdl_tests parity
#   sixteenth session: GEMV_M=2,4,8 cuda_gemv_tests cuda_gemv gemv_mma_ab one_batch_mma
#   seventeenth session: pd_overlap
#   nineteenth session: prefill_attn decode_splits profile_prefill
#   twentieth session: decode_tiles ttft_trace occupancy_sweep | decode_tiles ttft_trace_h11 ttft_trace |
#     ONLINE_TAG=old ONLINE_ENV="RADIXLM_KERNEL_DECODE_SMALL=4:64,4,3,0,1 RADIXLM_KERNEL_DECODE_OCCUPANCY=2,8:6,16:4
#     RADIXLM_UVICORN=asyncio,h11" one_batch_small online_x online attn_tests | parity layers_cuda offline_ci
#   twenty-first session: ONLINE_TAG=nopace ONLINE_ENV=RADIXLM_DECODE_PACING=off online_x online ttft_trace
#   (pacing is opt-in since the twenty-third: ONLINE_TAG=pace ONLINE_ENV=RADIXLM_DECODE_PACING=auto online_x online)
#   twenty-fifth session: decode_balanced offline_trace (decode_balanced at f9ffd62, since removed) |
#     ONLINE_TAG=mixed ONLINE_ENV="SERVER_FLAGS=--enable-mixed-chunk" online_x online | (twice) ONLINE_PROMPTS=60
#     ONLINE_TAG=mixed ONLINE_ENV="SERVER_FLAGS=--enable-mixed-chunk RADIXLM_STEP_TRACE=$OUT/trace_mixed.jsonl" online_x online
#   twenty-seventh session (H100): ONLINE_PROMPTS=60 ONLINE_TAG=mixed ONLINE_ENV="SERVER_FLAGS=--enable-mixed-chunk
#     RADIXLM_STEP_TRACE=$OUT/trace_mixed.jsonl" online_x online | parity one_batch_small shared_prefix | offline_ci |
#     (twice, tags m1 m2) ONLINE_PROMPTS=30 ONLINE_TAG=m1 ONLINE_ENV="SERVER_FLAGS=--enable-mixed-chunk ..." online_x |
#     (fresh machine, a one-off sitecustomize logging Triton's compiles on PYTHONPATH) ONLINE_PROMPTS=14 ... online_x
#   twenty-eighth session (H200; DIAG_TRITON_LOG is a one-off compile logger kept outside the repo): (with it)
#     ONLINE_PROMPTS=60 ONLINE_TAG=mixed ONLINE_ENV="SERVER_FLAGS=--enable-mixed-chunk RADIXLM_STEP_TRACE=..." online_x
#     online | offline_ci online one_batch_small parity | shared_prefix kernels | (with it) shared_prefix_radix (twice)
#   twenty-fourth session: ONLINE_TAG=pace ONLINE_ENV=RADIXLM_DECODE_PACING=auto online_x online |
#     start_method beside_test (at 7c90f38; start_method is gone since forkserver is refused on CUDA) | beside_test
#   thirty-first session (H100): OFFLINE_TAG=nolag OFFLINE_ENV=RADIXLM_LAG_FOR_FREES=0 offline_ci offline_ci_x
#     shared_prefix offline_hf | OFFLINE_TAG=f92 OFFLINE_FLAGS="--mem-fraction-static 0.92" offline_ci_x | logprob_memory
#   eighteenth session: OFFLINE_FLAGS="--schedule-policy lof" OFFLINE_TAG=lof offline_ci_x offline_ci |
#     one_batch_small offline_ci online | shared_prefix parity
#   thirty-sixth session: shared_prefix_fresh; offline_ci | online | (next, for 2213824) shared_prefix_fresh_radix
#   thirty-fifth session: offline_ci online parity shared_prefix | OFFLINE_TAG=nolag OFFLINE_ENV=RADIXLM_LAG_FOR_FREES=0
#     offline_ci_x one_batch_small | shared_prefix_radix kernels; shared_prefix_radix | (next) shared_prefix_fresh
#   two GPUs (nvidia-h200-x2, issue 9): bash benchmark/gpu_session.sh tp_parity one_batch_tp offline_ci_tp2
# Needs the carried folders .whl (bash ../shared/device/fetch-wheels.sh) and .models
# (python ../shared/models/make_tokenizer.py ../shared/models/llama-3.1-8b .models/llama-3.1-8b).
# Logs go to $OUT/<step>.log; each step prints its table at the end.
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
MODEL=.models/llama-3.1-8b
# the CUDA GEMV extension's build cache (radixlm_kernel.cuda_gemv): carry .kcache to skip the ~1 min build;
# every run copies what it built to $OUT/kcache so that the next call can carry it
export RADIXLM_CACHE_DIR=$PWD/.kcache

python3 -m pip install -q --no-index --no-deps --no-compile --target .site .whl/*.whl >"$OUT/install.log" 2>&1
export PYTHONPATH=$PWD/.site:$PWD/sgl-kernel:${PYTHONPATH:-} PATH=$PWD/.site/bin:$PATH
python3 -m pip install -q --no-deps --no-build-isolation -e . >>"$OUT/install.log" 2>&1
python3 -c "import radixlm, radixlm_kernel, torch; print('import ok', torch.__version__, torch.cuda.get_device_name())" \
  || { tail -20 "$OUT/install.log"; exit 1; }
nvidia-smi --query-gpu=name,memory.used,memory.total,clocks.sm --format=csv,noheader

step() {  # step NAME TIMEOUT_S COMMAND...
  local name=$1 limit=$2; shift 2
  echo "=== $name: $*"
  local t0=$(date +%s)
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "--- $name rc=$rc in $(( $(date +%s) - t0 )) s"
  grep -E '^\|| x$|^## |^multi|mismatch|speedup|radixlm /|^[a-z_]+:|step profile|per tile|passed|failed|Error|error' \
    "$OUT/$name.log" | grep -v Warning | tail -${STEP_TAIL:-30}
}

serve_and_bench() {  # serve_and_bench NAME TIMEOUT_S BENCH_SERVING_ARGS...: a server (SERVER_FLAGS), one
  local name=$1 limit=$2; shift 2  # bench_serving run against it, the server's counters and TTFT metric
  python3 -m radixlm.launch_server --model-path $MODEL --load-format dummy --dtype bfloat16 \
       --port 30000 --log-level warning --enable-metrics ${SERVER_FLAGS:-} >"$OUT/server_$name.log" 2>&1 &
  for i in $(seq 240); do curl -sf localhost:30000/health >/dev/null && break; sleep 1; done
  step $name $limit python3 benchmark/bench_serving.py --backend radixlm --base-url http://127.0.0.1:30000 \
       --tokenizer $MODEL --dataset-name random --tokenize-prompt --disable-tqdm "$@"
  grep -E "realised|TTFT (mean|median|p99)|ITL per token (median|p99)|TPOT median|concurrency|Output token throughput" \
    "$OUT/$name.log"
  curl -s localhost:30000/get_server_info | python3 -c "import json, sys; d = json.load(sys.stdin); print(
    'server:', {k: d.get(k) for k in ('prefills_beside_decode', 'num_prefill_batches', 'overlapped_steps',
    'decode_steps', 'decode_wall_s', 'prefill_wall_s', 'paced_holds', 'paced_arrivals', 'paced_late_launches',
    'paced_hold_s')})"
  curl -s localhost:30000/metrics | grep -E "time_to_first_token_seconds_(sum|count)"
  kill %1; wait
}

for what in "$@"; do
  case $what in
    sweep) step sweep 300 python3 benchmark/gpu_kernel_sweep.py ;;
    sweep_shared) step sweep_shared 200 python3 benchmark/gpu_kernel_sweep.py --shared-only ;;
    fi_stage1) cp .fi1/fi.part.aa /tmp/ && echo "fi part 1 staged in /tmp" ;;
    fi_install) cat /tmp/fi.part.aa .fi2/fi.part.ab > /tmp/flashinfer_python-0.7.4-py3-none-any.whl &&
                python3 -m pip install -q --no-index --no-deps --no-compile --target .site \
                  /tmp/flashinfer_python-0.7.4-py3-none-any.whl >>"$OUT/install.log" 2>&1
                python3 -c "import flashinfer; print('flashinfer', flashinfer.__version__)" ;;
    fi_tests) step fi_tests 300 python3 -m pytest -q -x test/unit/layers/test_flashinfer_backend.py ;;
    fi_profile) step fi_profile 300 python3 benchmark/gpu_profile.py --model-path $MODEL --load-format dummy \
                 --attention-backend flashinfer ;;
    tp_parity) step tp_parity 420 python3 benchmark/gpu_tp_parity.py --config $MODEL --tp-size 2 ;;
    one_batch_tp) for tp in 1 2; do step one_batch_tp$tp 300 python3 benchmark/bench_one_batch.py --model-path $MODEL \
                 --load-format dummy --dtype bfloat16 --batch-size 1 64 --input-len 256 --output-len 128 --tp-size $tp; done ;;
    offline_ci_tp2) step offline_ci_tp2 420 python3 benchmark/bench_offline_throughput.py --model-path $MODEL \
                 --load-format dummy --dtype bfloat16 --dataset random --num-prompts 500 --random-input-len 4096 \
                 --random-output-len 2048 --random-range-ratio 0 --skip-hf --cuda-graph-max-bs 512 --tp-size 2 ;;
    gemv_sweep) step gemv_sweep 240 python3 benchmark/gpu_gemv_sweep.py
                grep -E '^(\{|CONFIGS|SHAPE_CONFIGS|FUSED_GEMV|compiled|sweep done)' "$OUT/gemv_sweep.log" ;;
    one_batch_gemv_ab) (export RADIXLM_FUSED_GEMV_MAX_TOKENS=0; step one_batch_gemv_off 240 python3 \
                 benchmark/bench_one_batch.py --model-path $MODEL --load-format dummy --dtype bfloat16 \
                 --batch-size 1 8 64 --input-len 256 --output-len 256)
                 step one_batch_gemv_on 240 python3 benchmark/bench_one_batch.py --model-path $MODEL --load-format dummy \
                 --dtype bfloat16 --batch-size 1 8 64 --input-len 256 --output-len 256 ;;
    profile) step profile 300 python3 benchmark/gpu_profile.py --model-path $MODEL --load-format dummy \
                 --decode 1x256,1x512,8x512,64x2048,192x2560 --prefill 1x0x1024,1x0x2048,1x0x4096,4x0x2048 ;;
    profile_bs1_ab)  # where the bs-1 step goes with the CUDA GEMVs off (the default) and on
            for tokens in 0 1; do (export RADIXLM_CUDA_GEMV_MAX_TOKENS=$tokens
              step "profile_bs1_gemv$tokens" 200 python3 benchmark/gpu_profile.py --model-path $MODEL --load-format dummy \
                 --cuda-graph-max-bs 8 --decode 1x256 --prefill 1x0x256
              grep -E '^ +[0-9.]+ us' "$OUT/profile_bs1_gemv$tokens.log" | head -24); done ;;
    profile_overlap) step profile_overlap 200 python3 benchmark/gpu_profile.py --model-path $MODEL --load-format dummy \
                 --cuda-graph-max-bs 8 --decode 1x256 --prefill 1x0x256 --overlap 1x256,8x2048
               grep -A14 'overlapped step ms' "$OUT/profile_overlap.log" ;;
    pd_overlap) step pd_overlap 420 python3 benchmark/gpu_pd_overlap.py --model-path $MODEL --load-format dummy \
                 ${PD_OVERLAP_ARGS:-} ;;
    profile_fp8) step profile_fp8 300 python3 benchmark/gpu_profile.py --model-path $MODEL --load-format dummy \
                 --kv-cache-dtype fp8_e4m3 --cuda-graph-max-bs 256 --decode 1x256,8x2560,256x2800 --prefill 1x0x2048 ;;
    argmax_tests) step argmax_tests 200 python3 -m pytest -q test/kernel/test_argmax.py test/kernel/test_sampling.py \
                 test/unit/sampling test/unit/layers/test_layers_cuda.py ;;
    one_batch_small) step one_batch_small 240 python3 benchmark/bench_one_batch.py --model-path $MODEL \
                 --load-format dummy --dtype bfloat16 --batch-size 1 8 --input-len 256 --output-len 256 ;;
    gemv_ops_ab)  # the bs-1 graph with the CUDA GEMVs on for some projections only (RADIXLM_CUDA_GEMV_OPS)
            for ops in none qkv,o_proj qkv,o_proj,lm_head; do (export RADIXLM_CUDA_GEMV_MAX_TOKENS=1
              [ $ops = none ] && export RADIXLM_CUDA_GEMV_MAX_TOKENS=0 || export RADIXLM_CUDA_GEMV_OPS=$ops
              step "gemv_ops_${ops//,/_}" 200 python3 benchmark/gpu_profile.py --model-path $MODEL --load-format dummy \
                 --cuda-graph-max-bs 8 --decode 1x256,1x256 --prefill 1x0x256 --overlap 1x256); done ;;
    rope_tests) step rope_tests 300 python3 -m pytest -q test/kernel/test_decode_rope.py test/kernel/test_triton_backend.py \
                 test/kernel/test_cascade_attention.py test/kernel/test_attention.py test/kernel/test_rotary.py \
                 test/unit/layers/test_layers_cuda.py ;;
    rope_ab)  # the bs-1 graph with the rotary embedding and KV store inside decode attention (default) or not
            for flag in 0 1; do (export RADIXLM_DECODE_FUSED_ROPE=$flag
              step "rope_ab_$flag" 200 python3 benchmark/gpu_profile.py --model-path $MODEL --load-format dummy \
                 --cuda-graph-max-bs 8 --decode 1x256,1x256,8x2048 --prefill 1x0x256 --overlap 1x256,8x2048
              grep -E '^ +[0-9.]+ us' "$OUT/rope_ab_$flag.log" | head -16); done ;;
    blas_ab)  # cuBLAS (torch's default) against cuBLASLt (TORCH_BLAS_PREFER_CUBLASLT=1) for every matmul
            for lt in 0 1; do (export TORCH_BLAS_PREFER_CUBLASLT=$lt
              step "blas_ab_$lt" 240 python3 benchmark/gpu_profile.py --model-path $MODEL --load-format dummy \
                 --cuda-graph-max-bs 8 --decode 1x256,1x256,8x2048 --prefill 1x0x2048,4x0x2048 --overlap 1x256,8x2048
              grep -E '^ +[0-9.]+ us' "$OUT/blas_ab_$lt.log" | head -20); done ;;
    pdl_ab)  # programmatic dependent launch of our kernels (the default on sm90+) against RADIXLM_PDL=0
            for pdl in 0 1; do (export RADIXLM_PDL=$pdl
              step "pdl_ab_$pdl" 240 python3 benchmark/gpu_profile.py --model-path $MODEL --load-format dummy \
                 --cuda-graph-max-bs 8 --decode 1x256,1x256,8x2048 --prefill 1x0x2048 --overlap 1x256,8x2048
              grep -E '^ +[0-9.]+ us' "$OUT/pdl_ab_$pdl.log" | head -20); done ;;
    gemv_pdl_ab)  # the bs-1 graph: cuBLAS against the CUDA GEMVs (default: mode 5), PDL off and per RADIXLM_CUDA_GEMV_PDL mode
            for cfg in ${GEMV_PDL_CFGS:-cublas pdl_off mode1 mode2 mode3}; do (
              case $cfg in
                cublas) export RADIXLM_CUDA_GEMV_MAX_TOKENS=0 ;;
                default) ;;
                pdl_off) export RADIXLM_CUDA_GEMV_MAX_TOKENS=1 RADIXLM_PDL=0 ;;
                mode*) export RADIXLM_CUDA_GEMV_MAX_TOKENS=1 RADIXLM_CUDA_GEMV_PDL=${cfg#mode} ;;
                nolm*) export RADIXLM_CUDA_GEMV_MAX_TOKENS=1 RADIXLM_CUDA_GEMV_PDL=${cfg#nolm} \
                         RADIXLM_CUDA_GEMV_OPS=qkv,o_proj,gate_up,down ;;
              esac
              step "gemv_pdl_ab_$cfg" 200 python3 benchmark/gpu_profile.py --model-path $MODEL --load-format dummy \
                 --cuda-graph-max-bs 8 --decode 1x256,1x256,8x2048 --prefill 1x0x256 --overlap 1x256
              grep -E '^ +[0-9.]+ us' "$OUT/gemv_pdl_ab_$cfg.log" | head -7); done ;;
    gemv_mma_ab)  # decode graphs at bs 1-8: the CUDA GEMVs up to GEMV_MMA_TOKENS rows (tensor cores at M >= 2) vs 1
            for tokens in ${GEMV_MMA_TOKENS:-1 8}; do (export RADIXLM_CUDA_GEMV_MAX_TOKENS=$tokens
              step "gemv_mma_ab_$tokens" 240 python3 benchmark/gpu_profile.py --model-path $MODEL --load-format dummy \
                 --cuda-graph-max-bs 8 --decode 1x256,2x256,4x256,8x256,8x2048 --prefill 1x0x256 --overlap 8x256
              grep -E '^ +[0-9.]+ us' "$OUT/gemv_mma_ab_$tokens.log" | head -7); done ;;
    one_batch_mma) (export RADIXLM_CUDA_GEMV_MAX_TOKENS=8  # one_batch_small with the CUDA GEMVs up to 8 rows
              step one_batch_mma 300 python3 benchmark/bench_one_batch.py --model-path $MODEL \
                 --load-format dummy --dtype bfloat16 --batch-size 1 4 8 --input-len 256 --output-len 256) ;;
    one_batch_cublas) (export RADIXLM_CUDA_GEMV_MAX_TOKENS=0  # one_batch_small with cuBLAS at every batch size
              step one_batch_cublas 240 python3 benchmark/bench_one_batch.py --model-path $MODEL \
                 --load-format dummy --dtype bfloat16 --batch-size 1 8 --input-len 256 --output-len 256) ;;
    pdl_tests) step pdl_tests 300 python3 -m pytest -q test/kernel/test_pdl.py test/kernel/test_norm.py \
                 test/kernel/test_activation.py test/kernel/test_argmax.py test/kernel/test_attention.py \
                 test/kernel/test_triton_backend.py test/kernel/test_decode_rope.py test/kernel/test_cascade_attention.py \
                 test/unit/layers/test_layers_cuda.py ;;
    gemm_layout) step gemm_layout 200 python3 benchmark/gpu_gemm_layout.py ;;
    merge_sweep) step merge_sweep 300 python3 benchmark/gpu_kernel_sweep.py --merge-only \
                 --decode 1x256,1x1024,1x4096,2x2048,4x512,4x2048,8x2048,16x1024 ;;
    kernels_rounding) step kernels_rounding 300 python3 -m pytest -q test/kernel/test_norm.py \
                 test/kernel/test_activation.py test/kernel/test_rotary.py test/kernel/test_attention.py \
                 test/unit/layers/test_layers_cuda.py ;;
    kernels) step kernels 300 python3 -m pytest -q test/kernel test/unit/layers/test_layers_cuda.py \
                 test/unit/layers/test_fused_gemv_cuda.py ;;
    parity) step parity 420 python3 benchmark/gpu_hf_parity.py --config $MODEL --layers 4 --new-tokens 32 ;;
    one_batch) step one_batch 240 python3 benchmark/bench_one_batch.py --model-path $MODEL --load-format dummy \
                 --dtype bfloat16 --batch-size 1 8 32 64 --input-len 256 --output-len 256 ;;
    kernels_new) step kernels_new 200 python3 -m pytest -q test/kernel/test_cascade_attention.py \
                 test/unit/layers/test_fused_gemv_cuda.py "test/unit/layers/test_layers_cuda.py::test_shared_prefix_decode_matches_hf" ;;
    one_batch_eager) step one_batch_eager 120 python3 benchmark/bench_one_batch.py --model-path $MODEL \
                 --load-format dummy --dtype bfloat16 --batch-size 1 --input-len 256 --output-len 32 --disable-cuda-graph ;;
    offline_hf) step offline_hf 200 python3 benchmark/bench_offline_throughput.py --model-path $MODEL \
                 --load-format dummy --dtype bfloat16 --dataset random --num-prompts 256 --random-input-len 512 \
                 --random-output-len 128 --random-range-ratio 1.0 --skip-hf --cuda-graph-max-bs 256 ;;
    offline_ci_fp8) step offline_ci_fp8 420 python3 benchmark/bench_offline_throughput.py --model-path $MODEL \
                 --load-format dummy --dtype bfloat16 --dataset random --num-prompts 500 --random-input-len 4096 \
                 --random-output-len 2048 --random-range-ratio 0 --skip-hf --cuda-graph-max-bs 512 \
                 --kv-cache-dtype fp8_e4m3 ;;
    offline_ci_fp8_prev) (export RADIXLM_KERNEL_FP8_DECODE=64,2,3,0  # the fifth session's fp8 decode knobs
                 step offline_ci_fp8_prev 420 python3 benchmark/bench_offline_throughput.py --model-path $MODEL \
                 --load-format dummy --dtype bfloat16 --dataset random --num-prompts 500 --random-input-len 4096 \
                 --random-output-len 2048 --random-range-ratio 0 --skip-hf --cuda-graph-max-bs 512 \
                 --kv-cache-dtype fp8_e4m3) ;;
    shared_prefix_nocascade) (export RADIXLM_DECODE_CASCADE=0; step shared_prefix_nocascade 240 \
                 python3 benchmark/bench_offline_throughput.py --model-path $MODEL \
                 --load-format dummy --dtype bfloat16 --dataset generated-shared-prefix --gsp-num-groups 32 \
                 --gsp-prompts-per-group 16 --gsp-system-prompt-len 2048 --gsp-question-len 128 --gsp-output-len 256 \
                 --skip-hf --cuda-graph-max-bs 512) ;;
    offline_ci|offline_ci_x)  # offline_ci_x: with OFFLINE_FLAGS (extra flags) and OFFLINE_ENV ("NAME=VALUE ...",
            # exported for it only), logged as offline_ci_$OFFLINE_TAG; plain offline_ci ignores both, so that one
            name=offline_ci extra="" env=""  # call can run the A/B
            [ $what = offline_ci_x ] && name=offline_ci_${OFFLINE_TAG:-x} extra=${OFFLINE_FLAGS:-} env=${OFFLINE_ENV:-}
            ([ -n "$env" ] && export $env; step $name 420 python3 benchmark/bench_offline_throughput.py --model-path $MODEL \
                 --load-format dummy --dtype bfloat16 --dataset random --num-prompts 500 --random-input-len 4096 \
                 --random-output-len 2048 --random-range-ratio 0 --skip-hf --cuda-graph-max-bs 512 $extra) ;;
    shared_prefix|shared_prefix_radix) flags=("" "--disable-radix-cache"); [ $what = shared_prefix_radix ] && flags=("")
               for flag in "${flags[@]}"; do
                 step "shared_prefix${flag//-/_}" 240 python3 benchmark/bench_offline_throughput.py --model-path $MODEL \
                 --load-format dummy --dtype bfloat16 --dataset generated-shared-prefix --gsp-num-groups 32 \
                 --gsp-prompts-per-group 16 --gsp-system-prompt-len 2048 --gsp-question-len 128 --gsp-output-len 256 \
                 --skip-hf --cuda-graph-max-bs 512 $flag; done ;;
    shared_prefix_fresh|shared_prefix_fresh_radix)  # shared_prefix (radix cache on, then off; _radix: on only)
            # on an empty Triton cache, every compile logged (benchmark/compile_log): the compiles that fall inside
            # each timed run are printed
            flags=("" "--disable-radix-cache"); [ $what = shared_prefix_fresh_radix ] && flags=("")
            (export TRITON_CACHE_DIR=/tmp/triton_fresh PYTHONPATH=$PWD/benchmark/compile_log:$PYTHONPATH
             rm -rf "$TRITON_CACHE_DIR"
             for flag in "${flags[@]}"; do tag=${flag:+nocache}; tag=${tag:-radix}
               export RADIXLM_COMPILE_LOG="$OUT/compiles_$tag.log"; echo "=== shared_prefix_fresh_$tag"
               timeout 300 python3 benchmark/bench_offline_throughput.py --model-path $MODEL --load-format dummy \
                 --dtype bfloat16 --dataset generated-shared-prefix --gsp-num-groups 32 --gsp-prompts-per-group 16 \
                 --gsp-system-prompt-len 2048 --gsp-question-len 128 --gsp-output-len 256 --skip-hf \
                 --cuda-graph-max-bs 512 --log-level info $flag 2>&1 \
                 | while IFS= read -r l; do echo "$(date +%s.%N) $l"; done >"$OUT/shared_prefix_fresh_$tag.log"
               row=$(grep "x512 |" "$OUT/shared_prefix_fresh_$tag.log" | tail -1); echo "${row#* }"
               grep -E "step profile|warmed up" "$OUT/shared_prefix_fresh_$tag.log" | cut -d' ' -f2- | cut -c1-200
               t=${row%% *}; secs=$(echo "$row" | awk -F'|' '{print $4}')
               echo "compiles: $(wc -l <"$RADIXLM_COMPILE_LOG") in the process; inside the timed run:"
               awk -v t="$t" -v s="$secs" '$1 > t - s - 0.5 && $1 < t {printf "  %.1f s before its end: %s %s s\n",
                 t - $1, $3, $4}' "$RADIXLM_COMPILE_LOG"; done) ;;
    logprob_memory) step logprob_memory 240 python3 benchmark/gpu_logprob_memory.py --model-path $MODEL \
                 --load-format dummy --prompt-len 8000 --top-logprobs 5 ;;
    beside_test) (export RADIXLM_TEST_TOKENIZER=$MODEL; step beside_test 300 python3 -m pytest -q \
                 test/unit/managers/test_decode_fast_paths.py -k beside) ;;
    ttft_probe|ttft_trace|ttft_trace_h11)  # TTFT without decode load: 2,048-token prompts, 2 output tokens, one
            # at a time; the _trace steps add the step and hop traces, _h11 serves with asyncio + h11 (the A/B)
            [ $what != ttft_probe ] && export RADIXLM_STEP_TRACE="$OUT/step_trace_$what.jsonl" \
                 RADIXLM_HOP_TRACE="$OUT/hop_trace_$what.log"
            [ $what = ttft_trace_h11 ] && export RADIXLM_UVICORN=asyncio,h11
            serve_and_bench $what 120 --num-prompts 20 --random-input-len 2048 --random-output-len 2 \
                 --random-range-ratio 1 --request-rate 2
            if [ -n "${RADIXLM_STEP_TRACE:-}" ]; then python3 benchmark/step_trace_summary.py "$RADIXLM_STEP_TRACE" --skip 2
              python3 benchmark/hop_trace_summary.py "$RADIXLM_HOP_TRACE"
              unset RADIXLM_STEP_TRACE RADIXLM_HOP_TRACE; fi
            unset RADIXLM_UVICORN ;;
    online_x)  # `online` logged as online_$ONLINE_TAG with ONLINE_ENV ("NAME=VALUE ...") exported for it only: an A/B
            (export ${ONLINE_ENV:-}  # beside a plain `online` in one call
             serve_and_bench online_${ONLINE_TAG:-x} 300 --num-prompts ${ONLINE_PROMPTS:-100} --random-input-len 4096 \
                 --random-output-len 2048 --random-range-ratio 0 --request-rate 1) ;;
    online|online_trace|online_nobeside)  # ONLINE_PROMPTS (default 100) and SERVER_FLAGS (extra server flags)
            [ $what = online_trace ] && export RADIXLM_STEP_TRACE="$OUT/step_trace_$what.jsonl"
            [ $what = online_nobeside ] && export RADIXLM_PREFILL_BESIDE_DECODE=0  # the A/B: drain before prefills
            serve_and_bench $what 300 --num-prompts ${ONLINE_PROMPTS:-100} --random-input-len 4096 \
                 --random-output-len 2048 --random-range-ratio 0 --request-rate 1 --output-file "$OUT/$what.jsonl"
            if [ -n "${RADIXLM_STEP_TRACE:-}" ]; then python3 benchmark/step_trace_summary.py "$RADIXLM_STEP_TRACE" --skip 20
              unset RADIXLM_STEP_TRACE; fi
            unset RADIXLM_PREFILL_BESIDE_DECODE ;;
    cuda_gemv) step cuda_gemv 400 python3 benchmark/gpu_cuda_gemv.py ${GEMV_M:+--m $GEMV_M}
               grep -E '^(LAUNCH|decode step|extension)' "$OUT/cuda_gemv.log" ;;
    cuda_gemv_tests) step cuda_gemv_tests 300 python3 -m pytest -q test/kernel/test_cuda_gemv.py test/kernel/test_pdl.py \
                 test/unit/layers/test_fused_gemv_cuda.py ;;
    gemv_ab)  # the CUDA GEMVs end to end: off (cuBLAS + separate norm / SiLU kernels) against on (GEMV_AB_TOKENS)
            for tokens in 0 ${GEMV_AB_TOKENS:-1}; do (export RADIXLM_CUDA_GEMV_MAX_TOKENS=$tokens
              step "gemv_ab_$tokens" 150 python3 benchmark/bench_one_batch.py --model-path $MODEL \
                 --load-format dummy --dtype bfloat16 --batch-size ${GEMV_AB_BS:-1 2} --input-len 256 --output-len 256); done ;;
    fp8_sweep) step fp8_sweep 300 python3 benchmark/gpu_kernel_sweep.py --fp8-only \
                 --decode ${FP8_CASES:-8x2048,64x2048,192x2560,256x2800r,512x2300r} ;;
    heads_sweep) step heads_sweep 420 python3 benchmark/gpu_kernel_sweep.py --heads-only \
                 --decode ${HEADS_CASES:-1x512,64x2048,256x2800i,512x2300i} ;;
    kernel_asm) mkdir -p "$OUT/asm"; step kernel_asm 120 python3 benchmark/gpu_kernel_asm.py --dump "$OUT/asm"
                grep -E '^##|^   ' "$OUT/kernel_asm.log" ;;
    order_sweep) step order_sweep 420 python3 benchmark/gpu_kernel_sweep.py --order-only \
                 --decode ${ORDER_CASES:-1x512,64x2048,128x2800i,256x2800i,512x2300i} ;;
    occupancy_sweep) step occupancy_sweep 420 python3 benchmark/gpu_kernel_sweep.py --occupancy-only \
                 --decode ${OCC_CASES:-6x512,8x384,8x2048,8x2560r,16x2048r,32x2048r,64x2048r,176x2600i,256x2800i} ;;
    occupancy_ab)  # the decode occupancy bands end to end: OCC_AB_OLD (the eighteenth session's) against the default
            for occ in ${OCC_AB_OLD:-2,4:2,16:3} default; do (if [ $occ != default ]; then export RADIXLM_KERNEL_DECODE_OCCUPANCY=$occ; fi
              step "occupancy_ab_$(echo $occ | tr ',:' '__')" 150 python3 benchmark/bench_one_batch.py --model-path $MODEL \
                 --load-format dummy --dtype bfloat16 --batch-size 8 16 --input-len 2048 --output-len 64); done ;;
    prefill_attn) step prefill_attn 300 python3 benchmark/gpu_prefill_attention.py ${PREFILL_ATTN_CASES:+--cases $PREFILL_ATTN_CASES} ;;
    offline_trace)  # offline_ci with the step trace: where the run's wall time goes (device, idle device)
            (export RADIXLM_STEP_TRACE="$OUT/step_trace_offline.jsonl"
             step offline_trace 420 python3 benchmark/bench_offline_throughput.py --model-path $MODEL \
                 --load-format dummy --dtype bfloat16 --dataset random --num-prompts 500 --random-input-len 4096 \
                 --random-output-len 2048 --random-range-ratio 0 --skip-hf --cuda-graph-max-bs 512
             python3 benchmark/step_trace_summary.py "$RADIXLM_STEP_TRACE") ;;
    decode_tiles) STEP_TAIL=60 step decode_tiles 420 python3 benchmark/gpu_decode_tiles.py ${TILES_CASES:+--decode $TILES_CASES} ;;
    decode_splits) step decode_splits 300 python3 benchmark/gpu_kernel_sweep.py --splits-only \
                 --decode ${SPLITS_CASES:-1x2048,2x2600r,4x2048,4x2600r,6x2600r,8x2048,8x2560r,12x2048r,16x1024,16x2048r,32x2048r,64x2048r} ;;
    profile_prefill) step profile_prefill 240 python3 benchmark/gpu_profile.py --model-path $MODEL --load-format dummy \
                 --cuda-graph-max-bs 8 --decode 1x256 --prefill 1x0x2048,1x0x4096,4x0x2048
               grep -E '^ +[0-9.]+ us|prefill' "$OUT/profile_prefill.log" | head -40 ;;
    layers_cuda) step layers_cuda 240 python3 -m pytest -q test/unit/layers/test_layers_cuda.py ;;
    attn_tests) step attn_tests 200 python3 -m pytest -q test/kernel/test_attention.py test/kernel/test_cascade_attention.py ;;
    grammar) step grammar 150 python3 benchmark/bench_grammar.py --tokenizer .models/smollm2-tokenizer --device cuda \
                 --steps 100 --mask-fill-threads 4 ;;
    *) echo "unknown step $what" ;;
  esac
done
if ls .kcache/kernels/*.so >/dev/null 2>&1; then mkdir -p "$OUT/kcache/kernels" && cp .kcache/kernels/*.so "$OUT/kcache/kernels/"; fi
