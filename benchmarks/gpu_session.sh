#!/usr/bin/env bash
# Everything a session with a lent CUDA GPU should run, in SESSION_SECONDS (default 470 s, which
# leaves a 15-minute lease time to start the machine and to rerun once), with what the machine
# has (no network, no nbval): the GPU tests of the fused kernels, newest first, then the forward,
# the sliding-window and the forward+backward benchmarks.
#
#     ATTNLIB_COMMIT=<commit> OUT=/path bash benchmarks/gpu_session.sh
#
# ATTNLIB_COMMIT names the commit measured, since the copy on the GPU machine has no .git (git's
# answer is taken where there is one); summary.txt also records a hash of the tree's Python files,
# so that a copy with uncommitted changes shows. $OUT (default gpu-session/) receives five files,
# within the 8 that come back: summary.txt (one line per step, the failed tests), logs.tar.gz
# (each step's log and JUnit XML, archived after every step), fused_gpu.json,
# fused_window_gpu.json and fused_backward_gpu.json (written after every point). stdout repeats
# the summary.
#
# Each step runs under its own limit, cut to what is left of the session. At the limit it gets
# SIGINT, on which pytest still prints its failures and durations and writes its XML (SIGTERM
# loses them all), and SIGKILL GRACE seconds later. The benchmarks start no point within their
# margin of the limit; the JSON they wrote stays either way. A failed step never stops the next.
# MACHINE_LIMIT, TESTS_OFFSETS_LIMIT, TESTS_BACKWARD_LIMIT, TESTS_REST_LIMIT, FUSED_GPU_LIMIT and
# FUSED_WINDOW_LIMIT replace the limits below; fused_backward_gpu takes what is left.
#
# The limits, from compilations counted and timed without a GPU, the review's way
# (../shared/reviews/2026-12-01-gpu-readiness.md): `python -O benchmarks/gpu_compiles.py` replays
# every GPU test on the CPU and counts the distinct sm_90 compilations of each step (Triton keeps
# them on disk, so a step compiles only what no earlier one did). `--compile-times` there compiles
# each kind of kernel for sm_90 here (Triton 3.9, ptxas included; medians on a shared 2-core machine
# at load 4-7, a third less when calmer): forward 1.07 s (0.7-1.9), decode 1.09, backward
# preprocess 0.39, key/value 1.24, query 1.16; an autotune run ~0.15 s (the review's figure); a
# pytest-xdist worker ~10 s to start (torch, CUDA, collection).
#   step            tests  compiles (forward, decode, backward)  autotune runs  serial s  8 workers s
#   tests_offsets       2     7 (4, 0, 3)                             4            8        18 (1 process)
#   tests_backward     22   115 (59, 0, 56)                          70          129        26
#   tests_rest         58   156 (147, 9, 0)                         160          191        34
# The limits leave room for what the count cannot see: workers that compile the same kernel at the
# same moment (each tunes its own autotune buckets), uneven shares, the test bodies (float64
# references on the GPU), and for the offsets step 600000-row kernels and references (~25 s for
# the forward, the review measured; ~15 s more for the backward). An overrun is interrupted, its
# report kept, and the next step starts.
#   machine              30 s  nvidia-smi and versions (interrupted after 10 s).
#   tests_offsets        75 s  the 2**31 tests alone, one process, ~15 GB then ~50 GB of GPU memory.
#   tests_backward      100 s  the backward tests (names with grad or backward), -n JOBS.
#   tests_rest          120 s  the forward and decoding tests, -n JOBS.
#   fused_gpu            90 s  decoding first, then 3 lengths; --budget 30 s short (a point < 20 s).
#   fused_window_gpu     50 s  S = 16384, W = S first, then 256, 1024, 4096: fused and SDPA with the
#                              window as a dense mask, forward and forward+backward (~8 compiles, 4
#                              autotune runs); --budget 25 s short. FlexAttention is left out here
#                              (--no-flex): its compile time is unknown; a longer session can drop that.
#   fused_backward_gpu  rest   >= 10 s (~200 s when the tests end early); --budget 40 s short.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-session}
PYTHON=${PYTHON:-python3}
SESSION_SECONDS=${SESSION_SECONDS:-470}
GRACE=${GRACE:-20}
cores=$(nproc 2>/dev/null || echo 2)
JOBS=${JOBS:-$(( cores / 2 > 8 ? 8 : (cores / 2 < 1 ? 1 : cores / 2) ))}
GPU_TESTS=${GPU_TESTS:-tests/test_fused_gpu.py}
# DRY_RUN=1: the same steps on a machine without a GPU; the tests skip (the XML still names each),
# the benchmarks run in Triton's interpreter on tiny shapes (--dry-run). tests/test_gpu_session.py.
DRY_RUN=${DRY_RUN:-0}
mkdir -p "$OUT"
LOGS=$(mktemp -d)
trap 'rm -rf "$LOGS"' EXIT
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
if [ "$DRY_RUN" = 1 ]; then
    export TRITON_INTERPRET=1
    FORWARD_SWEEP=(--dry-run)
    WINDOW_SWEEP=(--dry-run)
    BACKWARD_SWEEP=(--dry-run)
else
    unset TRITON_INTERPRET
    # Trimmed to three lengths; decoding comes first in the sweep.
    FORWARD_SWEEP=(--lengths 1024 4096 16384)
    # S = 16384, bf16, d = 128: W = S, 256, 1024, 4096 (the script's defaults), without FlexAttention.
    WINDOW_SWEEP=(--no-flex)
    # Two lengths; d = 128 first, in both dtypes, then 64, then 256 where flash takes it.
    BACKWARD_SWEEP=(--dtypes bfloat16 float16 --head-dims 128 64 256 --lengths 16384 4096)
fi
export ATTNLIB_COMMIT=${ATTNLIB_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}

left() {  # seconds left of the session
    echo $((SESSION_SECONDS - SECONDS))
}

note() {  # a line for summary.txt and stdout
    echo "$*" | tee -a "$OUT/summary.txt"
}

archive() {  # every log and XML so far, replacing the archive in one step
    tar -czf "$OUT/logs.tar.gz.partial" -C "$LOGS" . && mv "$OUT/logs.tar.gz.partial" "$OUT/logs.tar.gz"
}

step() {  # name, time limit in seconds, command...
    local name=$1 limit=$2 start=$SECONDS status outcome result
    shift 2
    if [ "$(left)" -lt "$limit" ]; then limit=$(left); fi
    if [ "$limit" -le "$GRACE" ]; then
        note "$name: not run, $(left) s left of the session's $SESSION_SECONDS"
        return 1
    fi
    timeout -s INT -k "$GRACE" $((limit - GRACE)) "$@" > "$LOGS/$name.log" 2>&1
    status=$?
    case $status in
        124) outcome="interrupted at its limit of $limit s";;
        137) outcome="killed $GRACE s after the interrupt";;
        *) outcome="exit $status";;
    esac
    # pytest's last line, "2 failed, 17 passed in 51.2s", when the step was a test run
    result=$(grep -E '(passed|failed|errors?|skipped|deselected|no tests ran).* in [0-9.]+s' "$LOGS/$name.log" \
             | tail -n 1 | tr -d '=' | sed 's/^ *//; s/ *$//')
    note "$name: $outcome after $((SECONDS - start)) s${result:+: $result}"
    grep -E '^(FAILED|ERROR) ' "$LOGS/$name.log" | head -n 20 | sed 's/^/    /' | tee -a "$OUT/summary.txt"
    archive
    return "$status"
}

tests() {  # name, time limit, workers, -k expression: a part of the GPU tests
    local name=$1 limit=$2 workers=$3 selection=$4
    # --noconftest: the GPU tests need only pytest, torch and Triton (tests/ on the path for
    # their helpers), not the suite's hypothesis profile.
    # shellcheck disable=SC2086  # GPU_TESTS: test files, separated by spaces
    PYTHONPATH="$PWD/tests:$PYTHONPATH" step "$name" "$limit" "$PYTHON" -m pytest $GPU_TESTS -k "$selection" \
        -n "$workers" --noconftest -p no:cacheprovider -o addopts= -q -rfEs --durations=15 \
        --junitxml="$LOGS/$name.xml"
}

: > "$OUT/summary.txt"
note "attnlib $ATTNLIB_COMMIT; tree $(find attnlib benchmarks tests -name '*.py' | LC_ALL=C sort | xargs cat \
    | sha256sum | cut -c1-12) (sha256 of its Python files); $JOBS workers; $SESSION_SECONDS s; dry run: $DRY_RUN"
step machine "${MACHINE_LIMIT:-30}" bash -c "nvidia-smi || echo 'no nvidia-smi'; $PYTHON -c 'import sys, torch, triton, numpy; \
print(sys.version.split()[0], torch.__version__, torch.version.cuda, triton.__version__, numpy.__version__)'"
OFFSETS=offsets_past_2_to_the_31
BACKWARD="(grad or backward) and not $OFFSETS"
tests tests_offsets "${TESTS_OFFSETS_LIMIT:-75}" 0 "$OFFSETS"
tests tests_backward "${TESTS_BACKWARD_LIMIT:-100}" "$JOBS" "$BACKWARD"
tests tests_rest "${TESTS_REST_LIMIT:-120}" "$JOBS" "not ($BACKWARD) and not $OFFSETS"
FORWARD_LIMIT=$(( $(left) < ${FUSED_GPU_LIMIT:-90} ? $(left) : ${FUSED_GPU_LIMIT:-90} ))
step fused_gpu "$FORWARD_LIMIT" "$PYTHON" benchmarks/fused_gpu.py "${FORWARD_SWEEP[@]}" \
    --budget $(( FORWARD_LIMIT > 30 ? FORWARD_LIMIT - 30 : 0 )) --output "$OUT/fused_gpu.json"
WINDOW_LIMIT=$(( $(left) < ${FUSED_WINDOW_LIMIT:-50} ? $(left) : ${FUSED_WINDOW_LIMIT:-50} ))
step fused_window_gpu "$WINDOW_LIMIT" "$PYTHON" benchmarks/fused_window_gpu.py "${WINDOW_SWEEP[@]}" \
    --budget $(( WINDOW_LIMIT > 25 ? WINDOW_LIMIT - 25 : 0 )) --output "$OUT/fused_window_gpu.json"
# The rest of the session, but 5 s to archive the logs.
BACKWARD_LIMIT=$(( $(left) - 5 ))
step fused_backward_gpu "$BACKWARD_LIMIT" "$PYTHON" benchmarks/fused_backward_gpu.py "${BACKWARD_SWEEP[@]}" \
    --budget $(( BACKWARD_LIMIT > 40 ? BACKWARD_LIMIT - 40 : 0 )) --output "$OUT/fused_backward_gpu.json"
note "session: $SECONDS s of $SESSION_SECONDS"
archive
