#!/bin/sh
# Data-parallel training on several GPUs of one machine (`giant train
# --gpus N`, NCCL), ready for a machine that has them; none has been lent
# yet, so nothing here has run on GPUs (bench/README.md).  In one call:
#   1. builds Release with CUDA and NCCL in build-bench-multigpu/ (or
#      GIANT_BENCH_BUILD_DIR; bench/gpu.sh's environment works too) and stops
#      when the build found no NCCL;
#   2. runs tests/dist/test_dist_nccl (one rank, then two processes on two
#      GPUs: the all-reduce's bits on both, broadcast, barrier);
#   3. trains the baseline shape (stage 2: hidden 512 x 6 blocks, global batch
#      4096, fp32 and, with --bf16, bf16) on 1, 2, ..., N GPUs for the same
#      steps, and prints stage 2's samples/s (the mean of the logged steps
#      after the first report), the speed-up and the efficiency against one
#      GPU, and the last validation loss of each, which should agree to a few
#      1e-6 relative (the same rows, times and noise: only the gradient's
#      summation order differs; tests/model/test_model_dist.c measures it on
#      the CPU);
#   4. repeats the N-GPU run with NCCL_ALGO=Ring NCCL_PROTO=Simple and checks
#      that its final checkpoint is the same bytes as a second such run
#      (run-to-run determinism of the NCCL order; across ranks the weights are
#      identical by construction).
# Usage: bench/multigpu.sh [--gpus N] [--steps S] [--bf16]
#   N: all GPUs nvidia-smi lists (at least 2); S: stage-2 steps (200).
# Needs: nvidia-smi, the CUDA toolkit with NCCL (nccl.h and libnccl beside
# cudart, or NCCL_HOME), sqlite3.  Takes about 10 minutes on 8 H100s.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build="${GIANT_BENCH_BUILD_DIR:-$root/build-bench-multigpu}"
gpus=""
steps=200
precisions="fp32"
while [ $# -gt 0 ]; do
    case "$1" in
        --gpus) gpus=$2; shift 2 ;;
        --steps) steps=$2; shift 2 ;;
        --bf16) precisions="fp32 bf16"; shift ;;
        *) echo "usage: $0 [--gpus N] [--steps S] [--bf16]" >&2; exit 2 ;;
    esac
done
command -v nvidia-smi >/dev/null || { echo "$0: no nvidia-smi: not a GPU machine" >&2; exit 1; }
command -v sqlite3 >/dev/null || { echo "$0: needs sqlite3 (Debian package sqlite3)" >&2; exit 1; }
have=$(nvidia-smi -L | grep -c '^GPU ' || true)
[ -n "$gpus" ] || gpus=$have
if [ "$have" -lt 2 ] || [ "$gpus" -lt 2 ] || [ "$gpus" -gt "$have" ]; then
    echo "$0: needs at least 2 GPUs and at most the $have present (asked: $gpus)" >&2
    exit 1
fi

echo "== build ($build)"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGIANT_CUDA=ON -DGIANT_NCCL=ON \
    >"$build.configure.log" 2>&1 || { tail -20 "$build.configure.log"; exit 1; }
cmake --build "$build" -j"$(nproc)" --target giant test_dist_nccl >/dev/null
giant="$build/giant"
nvidia-smi -L
echo "nccl: $(grep -m1 'GIANT_NCCL_LIB:' "$build/CMakeCache.txt" | cut -d= -f2)"

echo "== tests/dist/test_dist_nccl"
(cd "$build/tests/dist" && ./test_dist_nccl)

work=$(mktemp -d "${TMPDIR:-/tmp}/giant-multigpu.XXXXXX")
trap 'rm -rf "$work"' EXIT
# The baseline trunk shape of the product brief on the simulator's dataset 2;
# validation and checkpoints only at the end, so the log measures steps.
config() {  # PRECISION
    cat <<EOF
{"name": "multigpu-$1",
 "dataset": {"geometry": "dataset_2", "synthetic": {"n": 20000, "seed": 1}},
 "model": {"stage1": {"trunk": {"hidden": 64, "blocks": 2}},
           "stage2": {"objective": "flow", "trunk": {"hidden": 512, "blocks": 6}}},
 "train": {"device": "cuda:0", "precision": "$1", "batch": 4096,
           "steps": {"stage1": 20, "stage2": $steps}, "log_every": 10,
           "val_every": $steps, "ckpt_every": $steps, "val_size": 2048}}
EOF
}
q() { sqlite3 "$1" "$2"; }

for prec in $precisions; do
    config "$prec" >"$work/$prec.json"
    echo "== $prec: stage 2, global batch 4096, $steps steps"
    printf '%-5s %14s %9s %11s %16s\n' gpus samples/s speed-up efficiency "val loss"
    base=""
    n=1
    while [ "$n" -le "$gpus" ]; do
        db="$work/$prec-$n.db"
        if [ $((4096 % n)) -ne 0 ]; then n=$((n * 2)); continue; fi
        "$giant" train "$work/$prec.json" --db "$db" --data-dir "$work" --gpus "$n" --quiet \
            >"$work/$prec-$n.log" 2>&1 || { tail -20 "$work/$prec-$n.log"; exit 1; }
        sps=$(q "$db" "SELECT avg(value) FROM metrics WHERE stage = 'shower' AND
                       name = 'samples_per_s' AND step > 10")
        val=$(q "$db" "SELECT loss FROM val_losses WHERE stage = 'shower' ORDER BY step DESC LIMIT 1")
        [ -n "$base" ] || base=$sps
        awk -v n="$n" -v s="$sps" -v b="$base" -v v="$val" \
            'BEGIN { printf "%-5d %14.0f %8.2fx %10.0f%% %16.9g\n", n, s, s / b, 100 * s / b / n, v }'
        [ "$n" = "$gpus" ] && break
        n=$((n * 2))
        [ "$n" -gt "$gpus" ] && n=$gpus
    done
done

echo "== determinism: two runs on $gpus GPUs with NCCL_ALGO=Ring NCCL_PROTO=Simple"
for k in 1 2; do
    NCCL_ALGO=Ring NCCL_PROTO=Simple "$giant" train "$work/fp32.json" --db "$work/det-$k.db" \
        --data-dir "$work" --gpus "$gpus" --quiet >"$work/det-$k.log" 2>&1 ||
        { tail -20 "$work/det-$k.log"; exit 1; }
done
sql="SELECT checksum FROM checkpoints WHERE stage = 'shower' ORDER BY step DESC LIMIT 1"
a=$(q "$work/det-1.db" "$sql")
b=$(q "$work/det-2.db" "$sql")
if [ "$a" = "$b" ]; then
    echo "final stage-2 checkpoints identical: $a"
else
    echo "final stage-2 checkpoints differ: $a vs $b"
    exit 1
fi
