#!/bin/sh
# The GPU check, in one call, on a machine with an NVIDIA GPU that reaches no
# package registry (its Debian packages come along as files: .debs/, made by
# deploy/gpu-debs.sh):
#   1. unpacks every .deb in .debs/ with dpkg -x into a private prefix in the
#      build folder (never into /) and points pkg-config, CMake, the compiler,
#      the linker and the loader at it;
#   2. configures the whole project with CUDA on (sm_90, -lineinfo), builds
#      everything, and checks that the build took its libraries from the
#      prefix (bench/gpu/check-prefix.sh);
#   3. runs the whole ctest suite, then test_cuda_backend under
#      compute-sanitizer --tool memcheck;
#   4. times the baseline trunk (bench/gpu/bench_trunk) and the same model in
#      PyTorch eager (bench/gpu/torch_peer.py), and the real stage trainer at
#      the baseline shape, eager and as one graph a step
#      (bench/gpu/bench_stage); then the product as a user
#      runs it on the device (bench/gpu/product.sh: giant train, giant
#      sample, giant serve with a run trained through the API and showers
#      over loopback), and prints bench/gpu/summary.py's table of all three;
#   5. prints one table of the steps: status, seconds, what each found.
# Every step runs under `timeout`, its limit cut to what is left of the whole
# budget (GIANT_GPU_BUDGET, default 540 s), so that the call ends inside the
# 10 minutes a GPU machine gives one command, with its table printed.
# Logs: 8 files in $OUT when it is set, else in <build>/logs: build.log
# (versions, unpack, configure, build, prefix check), ctest.log and
# ctest-full.log (every test's output), memcheck.log, bench.log, torch.log,
# product.log, summary.txt (the table).
#
# --dry-run: the same on a machine without a GPU (the CUDA toolkit is needed,
# a device is not): the same unpacking, configure (CUDA on) and build, the
# prefix check, and the whole ctest suite, where the GPU tests skip with
# their reason; the steps that need a device print why they are skipped.
# It proves the script and the carried packages before a GPU machine is
# spent on them.  Its limits are 8 times the device's (2 cores, not 16) and
# its budget an hour.
#
# Usage: bench/gpu.sh [--dry-run] [--quick]
#   GIANT_GPU_BUILD_DIR  build folder (build-gpu, or build-gpu-dry for --dry-run)
#   GIANT_GPU_DEBS       the packages' folder (.debs at the repo root)
#   GIANT_GPU_JOBS       parallel compiles (nproc)
#   GIANT_GPU_BUDGET     seconds for the whole script (540; 3600 for --dry-run)
#   GIANT_GPU_CTEST_JOBS tests at once (a quarter of the cores; all for --dry-run)
#   GIANT_GPU_TESTS      all (default), or cuda: only the CUDA and NCCL tests (CI, whose
#                        main pass has run all the others already)
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
dry=0
quick=""
for a in "$@"; do
    case $a in
        --dry-run) dry=1 ;;
        --quick) quick=--quick ;;
        *) echo "usage: bench/gpu.sh [--dry-run] [--quick]" >&2; exit 2 ;;
    esac
done
if [ "$dry" = 1 ]; then
    build="${GIANT_GPU_BUILD_DIR:-$root/build-gpu-dry}"
else
    build="${GIANT_GPU_BUILD_DIR:-$root/build-gpu}"
fi
debs="${GIANT_GPU_DEBS:-$root/.debs}"
mkdir -p "$build"
build=$(cd "$build" && pwd -P)
prefix="$build/prefix"
bdir="$build/project"
logs="${OUT:-$build/logs}"
jobs="${GIANT_GPU_JOBS:-$(nproc 2>/dev/null || echo 4)}"
if [ "$dry" = 1 ]; then
    budget="${GIANT_GPU_BUDGET:-3600}" slow=8
else
    budget="${GIANT_GPU_BUDGET:-540}" slow=1
fi
mkdir -p "$build" "$logs"
steps="$build/steps.txt"
: >"$steps"
failed=0
t0=$(date +%s)

# step NAME LIMIT LOG CMD...: CMD under timeout, its output appended to LOG;
# LIMIT (seconds on the GPU machine) is cut to what is left of the budget,
# less 20 s for the table.  Sets rc and secs.
step() {
    name=$1 lim=$(($2 * slow)) log=$3
    shift 3
    left=$((budget - $(date +%s) + t0 - 20))
    [ "$lim" -gt "$left" ] && lim=$left
    if [ "$lim" -lt 5 ]; then
        rc=124 secs=0
        echo "== $name: no time left in the budget" | tee -a "$log"
        return
    fi
    echo "== $name (limit ${lim}s, at $(($(date +%s) - t0))s)" | tee -a "$log"
    s=$(date +%s)
    timeout -k 10 "$lim" "$@" >>"$log" 2>&1
    rc=$?
    secs=$(($(date +%s) - s))
}
# row NAME STATUS SECONDS NOTE: one line of the table
row() {
    printf '%-14s %-9s %5s  %s\n' "$1" "$2" "$3" "$4" >>"$steps"
    printf '   %s: %s (%ss) %s\n' "$1" "$2" "$3" "$4"
    case $2 in ok|skipped) ;; *) failed=1 ;; esac
}
status() {
    case $1 in 0) echo ok ;; 124|137) echo TIMEOUT ;; *) echo "FAIL($1)" ;; esac
}

blog="$logs/build.log"
{
    echo "bench/gpu.sh $* at $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "commit: $(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
    grep PRETTY_NAME /etc/os-release 2>/dev/null
    echo "glibc: $(ldd --version 2>/dev/null | head -1)"
    echo "cc: $(cc --version 2>/dev/null | head -1)"
    echo "cmake: $(cmake --version 2>/dev/null | head -1)"
    nvcc=$(command -v nvcc 2>/dev/null || echo "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc")
    echo "nvcc: $nvcc, $("$nvcc" --version 2>/dev/null | tail -2 | head -1)"
    echo "cores: $(nproc 2>/dev/null) ($(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | sed 's/^ //'))"
    # what bounds the host's threads (giant sample decodes and deflates on them)
    echo "OMP_NUM_THREADS: ${OMP_NUM_THREADS:-unset}; cgroup cpu.max: $(cat /sys/fs/cgroup/cpu.max 2>/dev/null || echo none)"
} >"$blog"
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
echo "gpu: ${gpu:-none}" | tee -a "$blog"
if [ "$dry" = 0 ] && [ -z "$gpu" ]; then
    echo "no GPU here (nvidia-smi lists none): use --dry-run on a machine without one" | tee -a "$blog"
fi
# the carried libraries are Debian 12's, built against glibc 2.36
glibc=$(ldd --version 2>/dev/null | head -1 | grep -o '[0-9]*\.[0-9]*$')
case $glibc in
    2.[0-9]|2.[0-2][0-9]|2.3[0-5])
        echo "glibc $glibc is older than Debian 12's 2.36: the carried libraries may not load" | tee -a "$blog" ;;
esac

# ---------------------------------------------------------------------------
# 1. the carried packages, unpacked into the prefix as dpkg would install
#    them.  Then the links: a package's absolute links (zlib1g-dev's libz.so
#    points at /lib/...) are made to point inside the prefix, and the links
#    that Debian's update-alternatives makes at install time (the .debs
#    cannot carry them) are made: OpenBLAS's and HDF5's .pc files under the
#    names the project asks pkg-config for, and the run-time libopenblas
# ---------------------------------------------------------------------------
lib="$prefix/usr/lib/x86_64-linux-gnu"
# shellcheck disable=SC2016
unpack='set -e
    rm -rf "$1" && mkdir -p "$1"
    for d in "$2"/*.deb; do
        if command -v dpkg >/dev/null; then
            dpkg -x "$d" "$1"
        else    # an image without dpkg: a .deb is an ar archive around a tar
            ar p "$d" data.tar.xz | tar -xJf - -C "$1"
        fi
    done
    find "$1" -type l -lname "/*" | while read -r k; do ln -sfn "$1$(readlink "$k")" "$k"; done
    l="$1/usr/lib/x86_64-linux-gnu"
    ln -sf ../openblas-pthread/pkgconfig/openblas.pc "$l/pkgconfig/openblas.pc"
    ln -sf hdf5-serial.pc "$l/pkgconfig/hdf5.pc"
    ln -sf openblas-pthread/libopenblas.so.0 "$l/libopenblas.so.0"'
ndebs=$(find "$debs" -maxdepth 1 -name '*.deb' 2>/dev/null | wc -l)
ok_unpack=0
if [ "$ndebs" -eq 0 ]; then
    row unpack FAIL 0 "no .deb in $debs: run deploy/gpu-debs.sh and carry .debs"
else
    step unpack 60 "$blog" sh -c "$unpack" sh "$prefix" "$debs"
    [ "$rc" = 0 ] && ok_unpack=1
    row unpack "$(status "$rc")" "$secs" \
        "$ndebs packages: $(du -sm "$debs" | cut -f1) MB carried, $(du -sm "$prefix" 2>/dev/null | cut -f1) MB unpacked"
fi

# The environment of the build and the tests: the prefix first.  pkg-config
# reads only the prefix's .pc files (PKG_CONFIG_LIBDIR replaces its default
# path) and prepends the prefix to their /usr paths (PKG_CONFIG_SYSROOT_DIR);
# CPATH and LIBRARY_PATH cover headers and libraries asked for without
# pkg-config; the loader finds the carried libraries and what they need
# (a few Debian 12 packages still install into /lib, hence both folders).
# The PyTorch peer runs with the machine's own library path (orig_ld).
orig_ld=${LD_LIBRARY_PATH-}
unset PKG_CONFIG_PATH
export PKG_CONFIG_LIBDIR="$lib/pkgconfig:$prefix/usr/share/pkgconfig"
export PKG_CONFIG_SYSROOT_DIR="$prefix"
export CMAKE_PREFIX_PATH="$prefix/usr"
export CPATH="$prefix/usr/include:$prefix/usr/include/x86_64-linux-gnu${CPATH:+:$CPATH}"
export LIBRARY_PATH="$lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
export LD_LIBRARY_PATH="$lib:$prefix/lib/x86_64-linux-gnu${orig_ld:+:$orig_ld}"
# the carried command-line tools the tests run (curl, sqlite3) before the
# machine's: they match the carried libraries the library path puts first
# (the machine's curl finds a libcurl older than its own there and stops).
# Only those two: the prefix's other programs stay off the path
tools="$build/tools"
mkdir -p "$tools"
for t in curl sqlite3; do
    [ -x "$prefix/usr/bin/$t" ] && ln -sfn "$prefix/usr/bin/$t" "$tools/$t"
done
export PATH="$tools:$PATH"

# ---------------------------------------------------------------------------
# 2. configure (the whole project, CUDA on), build everything, check the
#    build used the prefix.  sm_90 only (an H100/H200; halves the CUDA
#    compile), -lineinfo so that compute-sanitizer names source lines (it
#    changes no code), and warnings kept but not fatal (bench/gpu/warn-only.sh)
#    on the GPU machine, whose host compiler is another.  The dry run keeps
#    -Werror: its compiler is the one the project is built with (CI's), and
#    it is the suite's only Release build, where -O3 finds what the test
#    build's -O2 does not (the build deploy/run.sh starts the service from)
# ---------------------------------------------------------------------------
ok_build=0
if [ "$ok_unpack" = 1 ]; then
    launcher="$root/bench/gpu/warn-only.sh"
    [ "$dry" = 1 ] && launcher=
    step configure 120 "$blog" cmake -S "$root" -B "$bdir" -DCMAKE_BUILD_TYPE=Release \
        -DGIANT_CUDA=ON -DGIANT_CUDA_ARCHS=90 -DCMAKE_CUDA_FLAGS=-lineinfo \
        -DPKG_CONFIG_EXECUTABLE="$prefix/usr/bin/pkgconf" -DCMAKE_PREFIX_PATH="$prefix/usr" \
        -DCMAKE_C_COMPILER_LAUNCHER="$launcher" -DCMAKE_CUDA_COMPILER_LAUNCHER="$launcher"
    row configure "$(status "$rc")" "$secs" "$(grep -o 'giant: CUDA backend [^,]*' "$blog" | tail -1)"
    if [ "$rc" = 0 ]; then
        step build 300 "$blog" cmake --build "$bdir" -j"$jobs"
        [ "$rc" = 0 ] && ok_build=1
        row build "$(status "$rc")" "$secs" "$(grep -c 'warning:' "$blog") compiler warnings, -j$jobs"
        if [ "$rc" = 0 ]; then
            step prefix-check 60 "$blog" "$root/bench/gpu/check-prefix.sh" "$bdir" "$prefix"
            row prefix-check "$(status "$rc")" "$secs" \
                "$(grep -c VIOLATION "$blog") violations; $(grep -o 'libraries they load from the prefix: .*' "$blog" | tail -1)"
        fi
    fi
fi

# ---------------------------------------------------------------------------
# 3. the whole suite, then the CUDA op test under memcheck
# ---------------------------------------------------------------------------
tlog="$logs/ctest.log"
flog="$logs/ctest-full.log"
: >"$tlog"
: >"$flog"
: >"$build/skipped.txt"
cuda_root=$(sed -n 's/^set(CMAKE_CUDA_COMPILER_TOOLKIT_ROOT "\(.*\)")/\1/p' \
    "$bdir"/CMakeFiles/*/CMakeCUDACompiler.cmake 2>/dev/null | head -1)
if [ "$ok_build" = 1 ]; then
    # several tests at once, each with its OpenMP threads: on a GPU machine a
    # quarter of the cores' worth of tests, here (2 cores) both
    if [ "$dry" = 1 ]; then cj=$jobs; else cj=$(((jobs + 3) / 4)); fi
    cj=${GIANT_GPU_CTEST_JOBS:-$cj}
    # the CUDA tests first (test_dist_nccl among them: NCCL on the GPUs),
    # so that a slow suite cannot cost their answer; then all the others
    for part in cuda rest; do
        # test_k8s_schema installs kubernetes-validate from PyPI and runs
        # Debian's yamllint: a GPU machine reaches no registry (CI runs it)
        if [ $part = cuda ]; then sel="-R cuda|nccl" lim=120; else sel="-E cuda|nccl|test_k8s_schema" lim=200; fi
        if [ $part = rest ] && [ "${GIANT_GPU_TESTS:-all}" = cuda ]; then
            row ctest-rest skipped 0 "GIANT_GPU_TESTS=cuda"
            continue
        fi
        plog="$build/ctest-$part.log"
        : >"$plog"
        # shellcheck disable=SC2086
        step "ctest-$part" $lim "$plog" ctest --test-dir "$bdir" $sel -j"$cj" --timeout 300 \
            --output-on-failure
        cat "$plog" >>"$tlog"
        cat "$bdir/Testing/Temporary/LastTest.log" >>"$flog" 2>/dev/null
        # ctest says "100% tests passed out of N" when none failed
        row "ctest-$part" "$(status "$rc")" "$secs" "$(sed -n \
            -e 's/.*tests passed, \([0-9]*\) tests* failed out of \([0-9]*\).*/\2 tests, \1 failed/p' \
            -e 's/.*100% tests passed out of \([0-9]*\).*/\1 tests, 0 failed/p' "$plog"), $(
            grep -c '(Skipped)' "$plog") skipped, -j$cj"
    done
    # why each skipped test skipped: check_skip prints "SKIPPED: why", the
    # Python tests "SKIP: why", the fuzz runner "NAME: skipped: why"; tests
    # that give the same reason share one line (the 15 fuzz targets)
    awk '/^[0-9]+\/[0-9]+ Testing: / { t = $3 }
         { why = "" }
         /^SKIPPED: / { why = substr($0, 10) }
         /^SKIP: / { why = substr($0, 7) }
         /^[A-Za-z0-9_]+: skipped: / { why = $0; sub(/^[^:]*: skipped: /, "", why) }
         why != "" { if (!(why in who)) order[n++] = why; who[why] = who[why] (who[why] == "" ? "" : ", ") t }
         END { for (i = 0; i < n; i++) print "   skipped " who[order[i]] ": " order[i] }' \
        "$flog" >"$build/skipped.txt"
    [ "${GIANT_GPU_TESTS:-all}" = cuda ] || echo "   left out test_k8s_schema: it installs" \
        "kubernetes-validate from PyPI and runs yamllint; a GPU machine reaches no registry (CI runs it)" \
        >>"$build/skipped.txt"
    cat "$build/skipped.txt"
else
    row ctest skipped 0 "nothing built"
fi

mlog="$logs/memcheck.log"
: >"$mlog"
sanitizer=$(command -v compute-sanitizer 2>/dev/null || echo "${cuda_root:-/usr/local/cuda}/bin/compute-sanitizer")
if [ "$dry" = 1 ]; then
    row memcheck skipped 0 "dry run: memcheck needs a GPU ($([ -x "$sanitizer" ] && echo "$sanitizer" || echo "no compute-sanitizer here"))"
elif [ "$ok_build" = 0 ] || [ -z "$gpu" ]; then
    row memcheck skipped 0 "no build or no GPU"
elif [ ! -x "$sanitizer" ]; then
    row memcheck FAIL 0 "no compute-sanitizer (looked on PATH and in ${cuda_root:-/usr/local/cuda}/bin)"
else
    # memcheck: out-of-bounds and misaligned device accesses, and device
    # allocations left at exit; the program's own checks still run
    step memcheck 150 "$mlog" env -C "$bdir/tests/cuda" "$sanitizer" --tool memcheck \
        --leak-check full --error-exitcode 99 --print-limit 50 ./test_cuda_backend
    row memcheck "$(status "$rc")" "$secs" "$(grep -o 'ERROR SUMMARY: .*' "$mlog" | tail -1)"
fi

# ---------------------------------------------------------------------------
# 4. timings: bench_trunk, the PyTorch peer, the table of both
# ---------------------------------------------------------------------------
benchlog="$logs/bench.log"
torchlog="$logs/torch.log"
: >"$benchlog"
: >"$torchlog"
bench="$bdir/bench/gpu/bench_trunk"
if [ "$dry" = 1 ]; then
    row bench_trunk skipped 0 "dry run: needs a GPU ($( [ -x "$bench" ] && echo built || echo "NOT built"))"
    row torch-peer skipped 0 "dry run: needs a GPU"
    row bench_stage skipped 0 "dry run: needs a GPU ($( [ -x "$bdir/bench/gpu/bench_stage" ] && echo built || echo "NOT built"); bench_stage_cpu runs it on the CPU)"
elif [ "$ok_build" = 0 ] || [ -z "$gpu" ]; then
    row bench_trunk skipped 0 "no build or no GPU"
    row torch-peer skipped 0 "no build or no GPU"
    row bench_stage skipped 0 "no build or no GPU"
else
    # shellcheck disable=SC2086
    step bench_trunk 150 "$benchlog" "$bench" $quick
    row bench_trunk "$(status "$rc")" "$secs" "$(grep -c '^RESULT' "$benchlog") results"
    if env LD_LIBRARY_PATH="$orig_ld" python3 -c \
            'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
        # shellcheck disable=SC2086
        step torch-peer 120 "$torchlog" env LD_LIBRARY_PATH="$orig_ld" PYTHONUNBUFFERED=1 \
            python3 "$root/bench/gpu/torch_peer.py" $quick
        row torch-peer "$(status "$rc")" "$secs" "$(grep -c '^RESULT' "$torchlog") results"
    else
        row torch-peer skipped 0 "no PyTorch with CUDA in python3"
    fi
    # the real stage trainer at the baseline shape, eager and as one graph
    # a step (its rows go to bench.log beside bench_trunk's)
    stage_steps=30
    [ -n "$quick" ] && stage_steps=12
    step bench_stage 90 "$benchlog" "$bdir/bench/gpu/bench_stage" "$root/configs/baseline.json" \
        --device cuda:0 --steps "$stage_steps"
    row bench_stage "$(status "$rc")" "$secs" "$(grep -c '^RESULT stage_' "$benchlog") results"
fi

# the product as a user runs it: giant train, giant sample, giant serve on the
# device (bench/gpu/product.sh)
prodlog="$logs/product.log"
: >"$prodlog"
# first, the host's own rates (bench/host_bench.c: decoding, deflating, the
# writer, turning): what giant sample's share on this machine's cores can be,
# to set beside its time line in the product's log.  Rows as "HOST ...";
# it needs no device, so the dry run runs it too (at a small size).
hostn=16384
[ "$dry" = 1 ] && hostn=1024
if [ "$ok_build" = 0 ]; then
    row host skipped 0 "no build"
else
    hostraw="$build/host.txt"
    : >"$hostraw"
    step host 60 "$hostraw" "$bdir/bench/bench_host" "$root/configs/geometry/binning_dataset_2.xml" \
        --n "$hostn"
    sed 's/^RESULT/HOST/' "$hostraw" >>"$prodlog"
    row host "$(status "$rc")" "$secs" "$hostn showers: $(sed -n 's/^HOST decode_\([0-9]*\)threads [0-9.]* \([0-9]*\)$/decoding \2 showers\/s on \1 threads/p' "$prodlog" | tail -1), $(sed -n 's/^HOST deflate_libdeflate_1_1thread [0-9.]* \([0-9]*\).*/deflating \1 a core/p' "$prodlog" | tail -1)"
fi
if [ "$dry" = 1 ]; then
    row product skipped 0 "dry run: needs a GPU (GIANT_PRODUCT_DEVICE=cpu bench/gpu/product.sh GIANT DIR --small runs it on a CPU)"
elif [ "$ok_build" = 0 ] || [ -z "$gpu" ]; then
    row product skipped 0 "no build or no GPU"
else
    step product 240 "$prodlog" env GIANT_ORIG_LD="$orig_ld" "$root/bench/gpu/product.sh" \
        "$bdir/giant" "$build/product"
    row product "$(status "$rc")" "$secs" "$(grep -c '^PRODUCT ok' "$prodlog") ok, $(grep -c '^PRODUCT FAIL' "$prodlog") failed"
fi

# ---------------------------------------------------------------------------
# 5. the table
# ---------------------------------------------------------------------------
summary="$logs/summary.txt"
{
    echo "bench/gpu.sh$([ "$dry" = 1 ] && echo " --dry-run"): $(sed -n 's/^commit: //p' "$blog"), gpu: ${gpu:-none}, $(($(date +%s) - t0)) s in all"
    printf '%-14s %-9s %5s  %s\n' step status secs note
    cat "$steps"
    [ -s "$build/skipped.txt" ] && cat "$build/skipped.txt"
    grep '^PRODUCT' "$prodlog" 2>/dev/null
    if grep -q '^RESULT' "$benchlog" "$torchlog" "$prodlog" 2>/dev/null; then
        timeout 30 python3 "$root/bench/gpu/summary.py" "$benchlog" "$torchlog" "$prodlog"
    fi
} >"$summary" 2>&1
echo
echo "== summary (logs in $logs)"
cat "$summary"
exit "$failed"
