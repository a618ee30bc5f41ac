#!/usr/bin/env bash
# Everything a session with a lent CUDA GPU should run, in under 8 minutes,
# with what the machine has (no network): the GPU tests of the fused kernel,
# the benchmark against torch's flash, cuDNN and math backends, and Chapter
# 9's nbval test. Results and logs go to $OUT (default: gpu-session/).
#
#     ATTNLIB_COMMIT=<commit> OUT=/path bash benchmarks/gpu_session.sh
#
# ATTNLIB_COMMIT names the commit measured where the copy has no .git.
# Each step has its own time limit; a step that fails is logged, and the
# next one still runs. summary.txt has one line per step.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-session}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
unset TRITON_INTERPRET

step() {  # name, time limit in seconds, command...
    local name=$1 limit=$2 start=$SECONDS
    shift 2
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
step fused_gpu 200 "$PYTHON" benchmarks/fused_gpu.py && cp attnlib/results/fused_gpu_*.json "$OUT"/
step nbval_ch09 60 "$PYTHON" -m pytest chapters/09_fused_kernel.ipynb --nbval -p no:cacheprovider -o addopts= -q
