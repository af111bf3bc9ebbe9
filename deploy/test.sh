#!/bin/sh
# Builds giant with AddressSanitizer + UBSan and runs the whole test suite.
# Usage: deploy/test.sh            (from anywhere inside the checkout)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/deploy/install-deps.sh"
build="${GIANT_TEST_BUILD_DIR:-$root/build-test}"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGIANT_SANITIZE=ON
cmake --build "$build" -j"$(nproc)"
cd "$build"
ctest --output-on-failure -j"$(nproc)" "$@"
