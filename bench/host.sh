#!/bin/sh
# The host's share of `giant sample` (what a GPU does not take): decoding
# model vectors into showers and deflating the HDF5 chunks, with zlib's
# compress2 on the same chunks as the peer (the writer used it before
# libdeflate).  Builds Release in build-bench/ and runs bench/host_bench.c
# on dataset-2 showers from the built-in simulator.
# Usage: bench/host.sh [--n N]   (default 16384 showers; all cores)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build="${GIANT_BENCH_BUILD_DIR:-$root/build-bench}"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGIANT_SANITIZE=OFF -DGIANT_CUDA=OFF \
    >/dev/null
cmake --build "$build" --target bench_host -j"$(nproc)" >/dev/null
echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) cpu: $(grep -m1 'model name' /proc/cpuinfo |
    cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
exec "$build/bench/bench_host" "$root/configs/geometry/binning_dataset_2.xml" --n 16384 "$@"
