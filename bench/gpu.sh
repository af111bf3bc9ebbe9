#!/bin/sh
# GPU check and benchmark, in one call, on a machine with an NVIDIA GPU:
#   1. configures a GPU-only build (the whole project with GIANT_GPU_ONLY=ON;
#      if that cannot configure there, the standalone bench/gpu project, which
#      needs only the CUDA toolkit),
#   2. builds the CUDA backend, its tests and bench_trunk,
#   3. runs the CUDA tests (every op and whole steps against the CPU backend,
#      graph replay against eager),
#   4. times the baseline trunk (bench/gpu/bench_trunk) and, when PyTorch is
#      importable, the same model in PyTorch (bench/gpu/torch_peer.py),
#   5. prints one table (bench/gpu/summary.py).
# Logs go to $OUT when it is set, else to <build>/logs.
# Usage: bench/gpu.sh [--quick]
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build="${GIANT_GPU_BUILD_DIR:-$root/build-gpu}"
logs="${OUT:-$build/logs}"
quick=""
[ "${1:-}" = "--quick" ] && quick="--quick"
mkdir -p "$build" "$logs"
jobs=$(nproc 2>/dev/null || echo 4)
t0=$(date +%s)
say() { echo "== $* ($(( $(date +%s) - t0 ))s)"; }

command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$logs/gpu.txt"

say "configure"
mode=project
if ! cmake -S "$root" -B "$build/project" -DGIANT_GPU_ONLY=ON -DGIANT_CUDA=ON \
        -DCMAKE_BUILD_TYPE=Release >"$logs/configure.log" 2>&1; then
    echo "whole-project GPU-only configure failed (see configure.log); using bench/gpu alone"
    mode=standalone
    cmake -S "$root/bench/gpu" -B "$build/standalone" -DCMAKE_BUILD_TYPE=Release \
        -DGIANT_WERROR=OFF >>"$logs/configure.log" 2>&1 || { tail -30 "$logs/configure.log"; exit 1; }
fi
bdir="$build/$mode"

say "build ($mode)"
targets="giant_cuda bench_trunk test_cuda_create test_cuda_backend"
# shellcheck disable=SC2086
if ! cmake --build "$bdir" -j"$jobs" --target $targets >"$logs/build.log" 2>&1; then
    if [ "$mode" = project ]; then
        echo "project build failed (see build.log); retrying with bench/gpu alone"
        mode=standalone
        bdir="$build/standalone"
        cmake -S "$root/bench/gpu" -B "$bdir" -DCMAKE_BUILD_TYPE=Release -DGIANT_WERROR=OFF \
            >>"$logs/configure.log" 2>&1 &&
            cmake --build "$bdir" -j"$jobs" >>"$logs/build.log" 2>&1 || { tail -40 "$logs/build.log"; exit 1; }
    else
        tail -40 "$logs/build.log"; exit 1
    fi
fi

grep -i "warning" "$logs/build.log" | head -20
say "tests"
(cd "$bdir" && ctest -R cuda --output-on-failure --timeout 300) >"$logs/tests.log" 2>&1
trc=$?
grep -E "tests passed|Failed|Passed|Skipped|FAILED|CHECK failed" "$logs/tests.log" | head -40
# the per-op error table, kept whether the test passed or not
for t in "$bdir/tests/cuda/test_cuda_backend" "$bdir/test_cuda_backend"; do
    if [ -x "$t" ]; then
        (cd "$(dirname "$t")" && ./test_cuda_backend) >"$logs/test_cuda_backend.log" 2>&1
        echo "test_cuda_backend exit $? (per-op errors in test_cuda_backend.log)"
        break
    fi
done

say "bench_trunk"
bench="$bdir/bench/gpu/bench_trunk"
[ -x "$bench" ] || bench="$bdir/bench_trunk"
"$bench" $quick 2>&1 | tee "$logs/bench.log"

if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    say "torch peer"
    PYTHONUNBUFFERED=1 python3 "$root/bench/gpu/torch_peer.py" $quick 2>&1 | tee "$logs/torch.log"
else
    echo "PyTorch with CUDA not importable: no peer numbers" | tee "$logs/torch.log"
fi

say "summary"
python3 "$root/bench/gpu/summary.py" "$logs/bench.log" "$logs/torch.log" | tee "$logs/summary.txt"
say "done (tests exit $trc, build mode $mode)"
exit $trc
