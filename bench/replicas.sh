#!/bin/sh
# Throughput of sampling replicas behind haproxy: showers/s through
# deploy/haproxy.cfg with 1, 2 and 3 replicas in service, measured by
# tests/server/test_replicas_haproxy.c (the same test ctest runs, with
# longer phases and larger requests), plus its kill-and-restart check.
# Builds Release in build-bench-replicas/ (or GIANT_BENCH_BUILD_DIR); the
# replicas sample on the CPU (--device cpu) whether or not CUDA is built.
# Needs Debian's haproxy (deploy/install-deps.sh).
# Usage: bench/replicas.sh [--seconds S] [--showers N]
#        (defaults 10 s a phase, 200 showers a request)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build="${GIANT_BENCH_BUILD_DIR:-$root/build-bench-replicas}"
seconds=10
showers=200
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --showers) showers=$2; shift 2 ;;
    *) echo "usage: $0 [--seconds S] [--showers N]" >&2; exit 2 ;;
  esac
done
command -v haproxy >/dev/null || { echo "$0: haproxy is not installed (deploy/install-deps.sh)" >&2; exit 1; }
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j"$(nproc)" --target giant test_replicas_haproxy >/dev/null
# Side by side with the farm's threads, spinning OpenMP threads would
# starve the replicas (tests/README.md).
export OMP_WAIT_POLICY=PASSIVE
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores"
echo "haproxy: $(haproxy -v | head -1)"
cd "$build/tests/server"
GIANT_SOURCE_DIR="$root" GIANT_BINARY_DIR="$build" \
GIANT_REPLICA_BENCH_MS=$((seconds * 1000)) GIANT_REPLICA_BENCH_COUNT="$showers" \
  ./test_replicas_haproxy | grep -E '^(replicas=|kill and restart)'
