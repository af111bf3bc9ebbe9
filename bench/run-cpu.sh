#!/bin/sh
# CPU benchmark: the engine vs PyTorch eager on the same model and shapes.
# Builds Release in build-bench/, then runs, in alternating rounds,
# bench/nn_bench (the engine, fp32 + bf16; matmul ceilings in round 1) and
# bench/torch_peer.py (PyTorch, fp32 + bf16 autocast, same thread count),
# and prints one table.  Each row takes, per side, the best median over the
# rounds, so a burst of load from other processes hits both sides alike.
# The sampling rows time the fixed-order forward the sampler runs (batch-
# invariant); a second table sets it against the same forward on oneDNN.
# --isa avx2 holds the engine to AVX2 on an AVX-512 machine (oneDNN and the
# fixed-order kernels; bf16 emulated), to measure what an AVX2 CPU gets.
# Usage: bench/run-cpu.sh [--batch N] [--iters N] [--rounds N] [--isa avx2]
#        (defaults 256, 10, 3, the CPU's best)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build="${GIANT_BENCH_BUILD_DIR:-$root/build-bench}"
batch=256
iters=10
rounds=3
precisions=fp32,bf16
while [ $# -gt 0 ]; do
  case "$1" in
    --batch) batch=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --isa)
      [ "$2" = avx2 ] || { echo "$0: --isa takes avx2" >&2; exit 2; }
      # the engine and its peer both held to AVX2 (OpenBLAS too); bf16 is
      # refused for training on such a CPU, and PyTorch has no AVX2 bf16
      # kernels, so only fp32 is compared
      export ONEDNN_MAX_CPU_ISA=AVX2 GIANT_CPU_KERNEL=avx2 GIANT_CPU_BF16=emulate \
             OPENBLAS_CORETYPE=Haswell
      precisions=fp32
      shift 2 ;;
    *) echo "usage: $0 [--batch N] [--iters N] [--rounds N] [--isa avx2]" >&2; exit 2 ;;
  esac
done
threads=$(nproc)

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGIANT_SANITIZE=OFF -DGIANT_CUDA=OFF >/dev/null
cmake --build "$build" --target giant_cpu -j"$threads" >/dev/null
cc -std=gnu11 -O3 -Wall -Wextra -Werror -fopenmp \
  -I"$root/engine/nn" -I"$root/engine/cpu" -I"$root/engine/common" \
  $(pkg-config --cflags openblas) \
  "$root/bench/nn_bench.c" \
  "$build/engine/cpu/libgiant_cpu.a" "$build/engine/nn/libgiant_nn.a" \
  "$build/engine/common/libgiant_common.a" \
  $(pkg-config --libs openblas) -ldnnl -lm -o "$build/nn_bench"

have_torch=0
/usr/bin/python3 -c 'import torch' 2>/dev/null && have_torch=1
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) $(uname -m), $threads threads, batch $batch," \
     "$iters timed iterations per median, $rounds rounds"
echo "# cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')," \
     "$(grep -qw avx512_bf16 /proc/cpuinfo && echo AVX512-BF16 || (grep -qw avx512f /proc/cpuinfo && echo AVX-512 || echo AVX2))" \
     "${GIANT_CPU_KERNEL:+(held to $GIANT_CPU_KERNEL)}"
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# model: expert trunk, 6480 voxels + 2 conditions x 32 in, hidden 512, 6 blocks, 6480 out"
r=1
while [ "$r" -le "$rounds" ]; do
  extra=--no-ceilings
  [ "$r" -eq 1 ] && extra=
  OMP_NUM_THREADS=$threads "$build/nn_bench" --batch "$batch" --iters "$iters" \
    --precision "$precisions" $extra | tee -a "$out"
  if [ "$have_torch" -eq 1 ]; then
    /usr/bin/python3 "$root/bench/torch_peer.py" --batch "$batch" --iters "$iters" \
      --threads "$threads" --precision "$precisions" | tee -a "$out"
  fi
  r=$((r + 1))
done
[ "$have_torch" -eq 1 ] || echo "# torch unavailable: no peer numbers"
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

echo
awk '
  function keep(a, k, v) { if (!(k in a) || v < a[k]) a[k] = v }
  $1 == "giant" { keep(g, $2 " " $3, $4); fl[$2 " " $3] = $6 }
  $1 == "torch" { keep(t, $2 " " $3, $4) }
  $1 == "ceiling" { c[$2] = $3 }
  END {
    printf "%-14s %10s %10s %12s %12s %8s\n", "step", "giant ms", "torch ms", "torch/giant", "giant GF/s", "target"
    n = split("fp32 train,fp32 sample,bf16 train,bf16 sample", keys, ",")
    split("2.0,3.0,1.0,1.0", tgt, ",")
    for (i = 1; i <= n; i++) {
      k = keys[i]
      if (!(k in g)) continue
      r = (k in t) ? sprintf("%.2fx", t[k] / g[k]) : "n/a"
      tm = (k in t) ? sprintf("%.1f", t[k]) : "n/a"
      printf "%-14s %10.1f %10s %12s %12.1f %7.1fx\n", k, g[k], tm, r, fl[k] / g[k] * 1e3, tgt[i]
    }
    # the fixed-order forward of the sampler against the same forward on oneDNN
    printf "\n%-14s %10s %12s %14s %8s\n", "sample", "fixed ms", "oneDNN ms", "oneDNN/fixed", "target"
    split("fp32,bf16", ps, ",")
    for (i = 1; i <= 2; i++) {
      f = ps[i] " sample"; o = ps[i] " sample-onednn"
      if (!(f in g) || !(o in g)) continue
      printf "%-14s %10.1f %12.1f %13.2fx %7.1fx\n", ps[i], g[f], g[o], g[o] / g[f], 0.9
    }
    for (k in c) printf "ceiling %-38s %8.1f GFLOP/s\n", k, c[k]
  }' "$out"
