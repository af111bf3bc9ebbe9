#!/bin/sh
# Proves that a build made by bench/gpu.sh took its libraries from the
# unpacked packages (PREFIX) and nothing else of the machine's beyond the C
# and compiler runtime and CUDA: on a machine that has the Debian -dev
# packages installed (any developer's, CI), a build could find them instead
# and pass here while it would fail on a GPU machine that has none.
#   1. what CMake found (CMakeCache.txt): every library and include folder of
#      the carried packages lies under PREFIX;
#   2. every header the compiler read (the .d files) lies in the checkout, the
#      build, PREFIX, CUDA or the compiler, or belongs to libc's or the
#      kernel's -dev package (asked of dpkg);
#   3. every shared library the built programs load (ldd, with the
#      environment bench/gpu.sh set) is found, and lies under PREFIX or CUDA
#      or is a C/compiler runtime library.
# Prints what it found and each violation; exits 1 on any.
# Usage: bench/gpu/check-prefix.sh BUILD_DIR PREFIX
set -u
bdir=$(cd "$1" && pwd -P) || exit 1
prefix=$(cd "$2" && pwd -P) || exit 1
root=$(cd "$(dirname "$0")/../.." && pwd)
cuda=$(sed -n 's/^set(CMAKE_CUDA_COMPILER_TOOLKIT_ROOT "\(.*\)")/\1/p' \
    "$bdir"/CMakeFiles/*/CMakeCUDACompiler.cmake 2>/dev/null | head -1)
[ -n "$cuda" ] || cuda=/usr/local/cuda
cuda_link=$cuda                       # as the compiler names it
cuda=$(cd "$cuda" && pwd -P)
bad=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

echo "what CMake found:"
grep -E '^(pkgcfg_lib_[^:]*|DNNL_LIB|DNNL_INCLUDE|OPENSSL_[A-Z_]*(LIBRARY|DIR)|PKG_CONFIG_EXECUTABLE):' \
    "$bdir/CMakeCache.txt" | grep -v -e '-ADVANCED:' -e '-NOTFOUND$' | sed 's/:[A-Z]*=/ = /' >"$tmp/found"
sed 's/^/  /' "$tmp/found"
for var in pkgcfg_lib_MHD_microhttpd pkgcfg_lib_JANSSON_jansson pkgcfg_lib_SQLITE_sqlite3 \
        pkgcfg_lib_OPENBLAS_openblas pkgcfg_lib_HDF5_hdf5 pkgcfg_lib_LIBXML2_xml2 \
        pkgcfg_lib_CURL_curl pkgcfg_lib_LIBDEFLATE_deflate DNNL_LIB DNNL_INCLUDE OPENSSL_CRYPTO_LIBRARY \
        PKG_CONFIG_EXECUTABLE; do
    grep -q "^$var = " "$tmp/found" || { echo "  VIOLATION: $var was not found"; bad=1; }
done
while read -r var _ path; do
    # the file itself, not a link to outside
    case $(readlink -f "$path") in
        "$prefix"/*) ;;
        *) echo "  VIOLATION: $var is $(readlink -f "$path"), not under the prefix"; bad=1 ;;
    esac
done <"$tmp/found"
if [ ! -d "$bdir/engine/cpu/CMakeFiles/giant_cpu.dir" ]; then
    # the CUDA tests compare against the CPU backend; without it they fall
    # back to the naive reference and prove less
    echo "  VIOLATION: configured without the CPU backend"
    bad=1
fi

# every path a compiler's .d file names, one a line, absolute, without the
# object itself.  A newer CMake also has the linker write link.d (every
# library a link read, the C runtime's among them): the libraries are step
# 3's business, checked by what the programs load
find "$bdir" -name '*.d' ! -name link.d -path '*/CMakeFiles/*' -exec cat {} + 2>/dev/null |
    sed 's/\\$//' | tr ' ' '\n' | grep '^/' | grep -v '\.o:*$' | sed 's/:$//' | sort -u >"$tmp/headers"
gcc_dir=$(dirname "$(cc -print-libgcc-file-name)")
: >"$tmp/system"
while read -r h; do
    case $h in
        # a compiler's own headers, wherever it lives (nvcc's host compiler
        # may be another gcc than cc, in /opt say)
        "$root"/*|"$bdir"/*|"$prefix"/*|"$cuda"/*|"$cuda_link"/*|"$gcc_dir"/*|*/lib/gcc/*/include/*|*/lib/gcc/*/include-fixed/*) ;;
        *) echo "$h" >>"$tmp/system" ;;
    esac
done <"$tmp/headers"
echo "headers read: $(wc -l <"$tmp/headers"), of them from the system: $(wc -l <"$tmp/system")"
if [ -s "$tmp/system" ] && command -v dpkg >/dev/null; then
    # the owner of each system header; libc's, the kernel's and libstdc++'s
    # (nvcc's host code) headers are on every machine with a compiler, and
    # NCCL's come with the machine's CUDA (the packages carry no NCCL).
    # dpkg's "diversion by" lines name no owner
    xargs dpkg -S <"$tmp/system" 2>/dev/null | grep -v '^diversion by' | cut -d: -f1 | tr ',' '\n' |
        sed 's/^ *//' | sort | uniq -c | sed 's/^ */  /' >"$tmp/owners"
    cat "$tmp/owners"
    if grep -vE ' (libc6-dev|linux-libc-dev|libcrypt-dev|libstdc\+\+-[0-9]+-dev|libgcc-[0-9]+-dev|libnccl-dev)$' \
            "$tmp/owners" | grep -q .; then
        echo "  VIOLATION: headers of packages a GPU machine lacks (above)"
        bad=1
    fi
    n_owned=$(xargs dpkg -S <"$tmp/system" 2>/dev/null | grep -vc '^diversion by')
    if [ "$n_owned" -lt "$(wc -l <"$tmp/system")" ]; then
        echo "  VIOLATION: system headers no package owns:"
        while read -r h; do dpkg -S "$h" >/dev/null 2>&1 || echo "    $h"; done <"$tmp/system"
        bad=1
    fi
fi

# the libraries the built programs load: the prefix's, the CUDA toolkit's (NCCL
# among them, wherever the machine keeps it),
# or the C and compiler runtime (CUDA's by name too: a machine may keep them
# outside the toolkit's folder)
base='^(libc|libm|libpthread|libdl|librt|libresolv|ld-linux-x86-64|libgcc_s|libstdc\+\+|libgomp|libquadmath|liblzma|libzstd|libcudart|libcublas|libcublasLt|libcuda|libnvrtc|libnvJitLink|libnccl)\.so'
find "$bdir" -type f -perm -u+x ! -name '*.sh' ! -path '*/CMakeFiles/*' ! -path "$prefix/*" |
    while read -r f; do
        [ "$(head -c 4 "$f" | tr -d '\177')" = ELF ] || continue
        ldd "$f" 2>/dev/null | sed "s|^|$f |"
    done >"$tmp/ldd"
echo "programs checked: $(cut -d' ' -f1 "$tmp/ldd" | sort -u | wc -l), libraries they load from the prefix: $(grep -c "=> $prefix/" "$tmp/ldd" | tr -d ' ') (\
$(grep "=> $prefix/" "$tmp/ldd" | awk '{print $2}' | sort -u | wc -l | tr -d ' ') distinct)"
awk '$3 == "=>" { print $2, $4 }' "$tmp/ldd" | sort -u | while read -r so path; do
    [ "$path" = not ] && { echo "  VIOLATION: $so not found"; echo x >>"$tmp/lddbad"; continue; }
    case $(readlink -f "$path") in
        "$prefix"/*|"$cuda"/*) continue ;;
    esac
    echo "$so" | grep -qE "$base" && continue
    echo "  VIOLATION: $so from $path, not the prefix"
    echo x >>"$tmp/lddbad"
done
[ -s "$tmp/lddbad" ] && bad=1
if [ "$bad" = 0 ]; then
    echo "check-prefix: ok (the build took nothing from the system beyond libc, the compiler and CUDA)"
else
    echo "check-prefix: FAILED"
fi
exit "$bad"
