#!/usr/bin/env bash
# Everything a session with a lent CUDA GPU should run, in under 8 minutes,
# with what the machine has (no network): the GPU tests of the fused kernel,
# Chapter 9's nbval test, the forward benchmark against torch's flash, cuDNN
# and math backends, and the forward+backward benchmark against flash and
# cuDNN. Results and logs go to $OUT (default: gpu-session/).
#
#     ATTNLIB_COMMIT=<commit> OUT=/path bash benchmarks/gpu_session.sh
#
# ATTNLIB_COMMIT names the commit measured where the copy has no .git.
# Each step has its own time limit, cut to what is left of SESSION_SECONDS
# (default 470) so that the whole session ends in time; a step that fails is
# logged, and the next one still runs. summary.txt has one line per step.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-session}
PYTHON=${PYTHON:-python3}
SESSION_SECONDS=${SESSION_SECONDS:-470}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
unset TRITON_INTERPRET

left() {  # seconds left of the session
    echo $((SESSION_SECONDS - SECONDS))
}

step() {  # name, time limit in seconds, command...
    local name=$1 limit=$2 start=$SECONDS
    shift 2
    if [ "$(left)" -lt "$limit" ]; then limit=$(left); fi
    if [ "$limit" -le 0 ]; then
        echo "$name: not run, the session's $SESSION_SECONDS s are spent" | tee -a "$OUT/summary.txt"
        return 1
    fi
    timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
    local status=$?
    echo "$name: exit $status after $((SECONDS - start)) s" | tee -a "$OUT/summary.txt"
    return $status
}

: > "$OUT/summary.txt"
step machine 60 bash -c "nvidia-smi; $PYTHON -c 'import sys, torch, triton, numpy; \
print(sys.version.split()[0], torch.__version__, torch.version.cuda, triton.__version__, numpy.__version__)'"
# --noconftest: the GPU tests need only pytest, torch and Triton (tests/ on the path for
# reference.py), not the suite's hypothesis profile.
PYTHONPATH="$PWD/tests:$PYTHONPATH" step test_fused_gpu 200 "$PYTHON" -m pytest tests/test_fused_gpu.py \
    --noconftest -p no:cacheprovider -o addopts= -q -rs --junitxml="$OUT/test_fused_gpu.xml"
step nbval_ch09 60 "$PYTHON" -m pytest chapters/09_fused_kernel.ipynb --nbval -p no:cacheprovider -o addopts= -q
step fused_gpu 200 "$PYTHON" benchmarks/fused_gpu.py && cp attnlib/results/fused_gpu_*.json "$OUT"/
# Forward + backward, a shorter sweep than the script's default: two lengths; d = 128 first,
# in both dtypes, then 64, then 256 where flash takes it. It starts no point once its budget
# (30 s short of its limit) is spent, and writes its JSON after every point, so what it
# measured is kept either way.
BACKWARD_LIMIT=$(( $(left) < 150 ? $(left) : 150 ))
BACKWARD_BUDGET=$(( BACKWARD_LIMIT > 30 ? BACKWARD_LIMIT - 30 : 0 ))
step fused_backward_gpu "$BACKWARD_LIMIT" "$PYTHON" benchmarks/fused_backward_gpu.py \
    --dtypes bfloat16 float16 --head-dims 128 64 256 --lengths 16384 4096 --budget "$BACKWARD_BUDGET"
cp attnlib/results/fused_backward_gpu_*.json "$OUT"/ 2>/dev/null \
    || echo "fused_backward_gpu: wrote no JSON" | tee -a "$OUT/summary.txt"
