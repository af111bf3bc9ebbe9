#!/bin/sh
# Builds giant with AddressSanitizer + UBSan and runs the whole test suite.
# Usage: deploy/test.sh [ctest args]   (from anywhere inside the checkout)
#
# On a CPU with AVX-512 the suite runs twice: as the CPU is, then held to
# what an AVX2-only CPU has (oneDNN limited to AVX2, the fixed-order
# sampling kernels to AVX2, bf16 emulated), so a green run here also means
# green on AVX2 machines.  GIANT_TEST_AVX2_PASS=0 skips the second pass,
# which leaves out the tests labelled isa_independent or fuzz (parsers and
# service plumbing with no engine arithmetic: the first pass covers them).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/deploy/install-deps.sh"
build="${GIANT_TEST_BUILD_DIR:-$root/build-test}"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGIANT_SANITIZE=ON
cmake --build "$build" -j"$(nproc)"
cd "$build"
ctest --output-on-failure -j"$(nproc)" "$@"
if grep -qw avx512f /proc/cpuinfo && [ "${GIANT_TEST_AVX2_PASS:-1}" != 0 ]; then
  echo "test.sh: again, held to AVX2 (ONEDNN_MAX_CPU_ISA=AVX2 GIANT_CPU_KERNEL=avx2 GIANT_CPU_BF16=emulate)"
  ONEDNN_MAX_CPU_ISA=AVX2 GIANT_CPU_KERNEL=avx2 GIANT_CPU_BF16=emulate \
    ctest --output-on-failure -j"$(nproc)" -LE 'isa_independent|fuzz' "$@"
fi
