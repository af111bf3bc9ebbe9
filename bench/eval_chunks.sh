#!/bin/sh
# How much of a `giant eval` AUC is the showers it happened to draw: cuts a
# generated file and a reference file into K disjoint pairs of N showers
# (shower k*N .. (k+1)*N - 1 of each) and runs one high-level classifier test
# on each pair.  Two samplings of the same network (another temperature, more
# solver steps) compared chunk by chunk see a difference a single 4 000-shower
# test cannot resolve (engine/model/README.md, "The sampler's temperature").
#
# usage: bench/eval_chunks.sh GENERATED.h5 REFERENCE.h5 GEOMETRY.xml [K [N]]
#        (K 5, N 4000 by default; GIANT names the binary, default build/giant)
# Needs h5py (Debian: python3-h5py) to cut the files.  Prints each chunk's AUC
# and their mean.
set -eu
[ $# -ge 3 ] || { sed -n 2,12p "$0" | sed 's/^# \{0,1\}//'; exit 2; }
gen=$1 ref=$2 geo=$3 k=${4:-5} n=${5:-4000}
giant=${GIANT:-build/giant}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 - "$gen" "$ref" "$work" "$k" "$n" <<'EOF'
import sys
import h5py
gen, ref, work, k, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
for tag, path in (("gen", gen), ("ref", ref)):
    with h5py.File(path, "r") as f:
        have = f["showers"].shape[0]
        if have < k * n:
            sys.exit(f"{path}: {have} showers, {k} chunks of {n} need {k * n}")
        for c in range(k):
            with h5py.File(f"{work}/{tag}.{c}.h5", "w") as g:
                g["incident_energies"] = f["incident_energies"][c * n:(c + 1) * n]
                g["showers"] = f["showers"][c * n:(c + 1) * n]
EOF
aucs=""
c=0
while [ "$c" -lt "$k" ]; do
    auc=$("$giant" eval "$work/gen.$c.h5" "$work/ref.$c.h5" --geometry "$geo" \
          --classifier high --no-distances 2>/dev/null | awk '/AUC \(high/ {print $4}')
    [ -n "$auc" ] || { echo "chunk $c: giant eval gave no AUC" >&2; exit 1; }
    echo "chunk $c: AUC high $auc"
    aucs="$aucs $auc"
    c=$((c + 1))
done
echo "$aucs" | awk '{s = 0; for (i = 1; i <= NF; i++) s += $i; printf "mean of %d: %.4f\n", NF, s / NF}'
