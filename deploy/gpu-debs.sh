#!/bin/sh
# Downloads (never installs) the Debian 12 packages that the whole project's
# build and tests need beyond what a GPU machine's CUDA image has, into .debs/
# at the repo root, for bench/gpu.sh to unpack there with dpkg -x into a
# private prefix.  A GPU machine that can reach no package registry gets them
# as files beside the working tree (carried with it), so they must stay small:
# the tree and .debs/ together have to stay well under 64 MiB.
#
# What is fetched:
#  - the -dev packages of every library the build looks for (the top
#    CMakeLists.txt) and zlib's, which HDF5 reads deflated chunks with, with
#    their headers, .pc files and .so links; libicu-dev for the headers that
#    libxml2's encoding.h includes; pkgconf (the image may lack one);
#  - curl and sqlite3, the command-line tools the tests run (see TEST_TOOLS);
#  - every shared library those need at run time, found by apt from an empty
#    package state, except the C and compiler runtime (libc6, libgcc-s1,
#    libstdc++6, libgomp1, libquadmath0) and liblzma5, libzstd1: the
#    GPU machine has its own, newer ones (its nvcc needs a host compiler),
#    and a Debian libgomp put first on its library path would shadow the one
#    its gcc's OpenMP code was compiled for.
# What is dropped, which nearly halves the size: static archives (most of
# the -dev packages' bytes; libicu-dev's 10 MB are nearly all archives) and
# OpenBLAS's libblas.so.3/liblapack.so.3 (the project links libopenblas
# itself, which holds LAPACK too).  Such a package is rebuilt with dpkg-deb,
# without its docs too; every other file stays byte for byte Debian's.
#
# Runs on Debian 12 (bookworm), as any user: apt's state goes into a private
# folder, nothing on the machine is touched.  The last step checks that every
# shared library a carried file needs is carried or is one of the runtime
# libraries above, and fails naming it otherwise.
#
# Usage: deploy/gpu-debs.sh [DIR]     (default: .debs at the repo root)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
dest="${1:-$root/.debs}"

# shellcheck disable=SC1091
. /etc/os-release
if [ "${VERSION_CODENAME:-}" != bookworm ]; then
    echo "gpu-debs: needs Debian 12 (bookworm) package sources; this is ${PRETTY_NAME:-unknown}" >&2
    exit 1
fi

DEV_PKGS="libmicrohttpd-dev libjansson-dev libsqlite3-dev libopenblas-pthread-dev \
libdnnl-dev libhdf5-dev libxml2-dev libicu-dev libcurl4-openssl-dev libssl-dev zlib1g-dev \
libdeflate-dev libxgboost-dev"
# libmicrohttpd.pc names gnutls under Requires.private, and pkg-config
# refuses a module whose requirements it cannot find, even for --cflags; so
# gnutls.pc and the .pc files it names come along (their headers are small;
# nothing compiles against them)
PC_ONLY_PKGS="libgnutls28-dev nettle-dev libtasn1-6-dev libidn2-dev libp11-kit-dev"
# the command-line tools the tests run, Debian's so that they match the
# carried libraries they load: a GPU machine's own curl, run with the
# prefix first on the library path, finds a libcurl older than the one it
# was built for and stops ("undefined symbol: curl_global_trace"), and it
# may have no sqlite3 at all
TEST_TOOLS="curl sqlite3"
# the run-time roots: the libraries the -dev packages' .so links point at,
# and pkgconf's binary
RUNTIME_ROOTS="libmicrohttpd12 libjansson4 libsqlite3-0 libopenblas0-pthread libdnnl2 \
libhdf5-103-1 libxml2 libicu72 libcurl4 libssl3 zlib1g libdeflate0 libxgboost0 libdmlc0 \
pkgconf-bin $TEST_TOOLS"
# on every machine with a C compiler and apt: not carried (see above).
# zlib1g is carried although every machine has it: zlib1g-dev's libz.so
# link points into it
BASE_PKGS="libc6 libgcc-s1 gcc-12-base libstdc++6 libgomp1 libquadmath0 liblzma5 libzstd1"
BASE_SONAMES="libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1 libresolv.so.2 \
ld-linux-x86-64.so.2 libgcc_s.so.1 libstdc++.so.6 libgomp.so.1 libquadmath.so.0 \
liblzma.so.5 libzstd.so.1 libtinfo.so.6"
# what sqlite3's readline drags in (readline-common's dpkg | install-info,
# dpkg's own libraries, libtinfo6): on every machine with a shell, and
# carrying them would put Debian 12's copies first on the library path of
# the machine's own programs, as curl showed, so they are left behind
BASE_PKGS="$BASE_PKGS readline-common dpkg tar libacl1 libselinux1 libmd0 libpcre2-8-0 \
libbz2-1.0 libtinfo6"

state=$(mktemp -d)
trap 'rm -rf "$state"' EXIT INT TERM
mkdir -p "$state/lists/partial" "$state/cache/archives/partial" "$state/new" "$state/x"
: >"$state/status"
# an empty dpkg status makes apt list the whole closure, not what this
# machine happens to lack
o="-q -oDir::State::Lists=$state/lists -oDir::Cache=$state/cache
-oDir::State::status=$state/status -oDebug::NoLocking=1
-oAPT::Architecture=amd64 -oAPT::Architectures=amd64"
# apt's download sandbox user cannot write into a private mktemp folder
[ "$(id -u)" -eq 0 ] && o="$o -oAPT::Sandbox::User=root"

echo "gpu-debs: package lists (private apt state)"
# shellcheck disable=SC2086
apt-get $o update >/dev/null

# shellcheck disable=SC2086
runtime=$(apt-get $o -s install --no-install-recommends $RUNTIME_ROOTS |
          awk '$1 == "Inst" { print $2 }')
keep=""
for p in $runtime; do
    case " $BASE_PKGS " in *" $p "*) continue ;; esac
    keep="$keep $p"
done

all="$DEV_PKGS $PC_ONLY_PKGS$keep"
echo "gpu-debs: downloading $(echo "$all" | wc -w) packages"
# shellcheck disable=SC2086
(cd "$state/new" && apt-get $o download $all >/dev/null)

echo "gpu-debs: trimming"
for deb in "$state/new"/*.deb; do
    name=$(basename "$deb")
    t="$state/t"
    rm -rf "$t"
    dpkg-deb -R "$deb" "$t"
    n0=$(find "$t" | wc -l)
    find "$t" -name '*.a' -delete
    case $name in
        libopenblas0-pthread_*|libopenblas-pthread-dev_*)
            rm -f "$t"/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so* \
                  "$t"/usr/lib/x86_64-linux-gnu/openblas-pthread/liblapack.so* ;;
    esac
    if [ "$(find "$t" | wc -l)" -eq "$n0" ]; then
        mv "$deb" "$state/x/$name"        # nothing dropped: Debian's own file
        echo "$name debian" >>"$state/trim"
    else
        rm -rf "$t/usr/share/doc" "$t/usr/share/man" "$t/usr/share/info" \
               "$t/usr/share/lintian" "$t/usr/share/bug"
        rm -f "$t/DEBIAN/md5sums"         # lists files that are gone now
        dpkg-deb --root-owner-group -Zxz -b "$t" "$state/x/$name" >/dev/null
        echo "$name trimmed" >>"$state/trim"
    fi
done
rm -rf "$state/t"

echo "gpu-debs: checking that every needed shared library is carried"
u="$state/u"
mkdir -p "$u"
for deb in "$state/x"/*.deb; do dpkg -x "$deb" "$u"; done
have=$(find "$u" \( -type f -o -type l \) -name 'lib*.so*' -exec basename {} \; | sort -u)
: >"$state/missing"
find "$u" -type f \( -name '*.so*' -o -path '*/bin/*' \) | while read -r f; do
    for need in $(readelf -d "$f" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
        case " $BASE_SONAMES " in *" $need "*) continue ;; esac
        echo "$have" | grep -qxF "$need" || echo " $need (${f#"$u"})" >>"$state/missing"
    done
done
if [ -s "$state/missing" ]; then
    echo "gpu-debs: not carried, yet needed by a carried file:" >&2
    cat "$state/missing" >&2
    exit 1
fi

# the manifest: what is in the folder and where it came from
(cd "$state/x" && for d in *.deb; do
    # shellcheck disable=SC2016
    printf '%s %s\n' "$(dpkg-deb --show --showformat='${Package} ${Version}' "$d")" \
        "$(awk -v d="$d" '$1 == d { print $2 }' "$state/trim")"
done) >"$state/x/MANIFEST"
rm -rf "$dest"
mkdir -p "$(dirname "$dest")"
mv "$state/x" "$dest"
echo "gpu-debs: $(find "$dest" -name '*.deb' | wc -l) packages in $dest"
# what travels with them: the files git does not ignore
tree=$(cd "$root" && git ls-files -z --cached --others --exclude-standard 2>/dev/null |
       xargs -0 -r stat -c %s 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
debs=$(du -sb "$dest" | cut -f1)
awk -v t="$tree" -v d="$debs" 'BEGIN { m = 1048576
    if (t == 0) printf "gpu-debs: packages %.1f MiB (the tree'"'"'s size unknown: not a git checkout here)\n", d / m
    else printf "gpu-debs: tree %.1f MiB + packages %.1f MiB = %.1f MiB (what travels to a GPU machine must stay under 64)\n", t / m, d / m, (t + d) / m }'
