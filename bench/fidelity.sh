#!/bin/sh
# The fidelity yardstick: trains each config on the built-in simulator, samples
# N showers with the acceptance test on and again with it off, and scores both
# with giant eval against N held-out simulated showers, beside a second
# independent reference (the floor a perfect model reaches at this N).  Gains
# must come from the networks, not the filter: an improvement counts when both
# rows move.  One row per config and acceptance setting:
#   accept       on: giant sample as served; off: --no-accept
#   train_s      training wall time (CPU, the threads this machine has)
#   showers/s    sampling speed (giant sample, batch 1024)
#   MFLOP/shower the sampler's matrix-product FLOPs per shower
#   mean_x       mean over the feature groups of the mean separation power,
#                as a multiple of the floor's
#   worst_x      the worst group's multiple of its floor (and which group)
#   spec_x       the voxel energy spectrum's worst feature as a multiple of
#                its floor (and which)
#   MLP hi / lo  the CaloChallenge MLP's AUC on the high-level features / the
#   trees hi/lo  voxels, and the gradient-boosted trees' on the same: the mean
#                over R whole tests (seeds 42 .. 42 + R - 1, giant eval
#                --cls-repeats) +- their standard deviation; the floor's in
#                brackets (the second reference against the reference)
# Then, per row, the trees' breakdown: the high-level trees on layers 0-9,
# 10-24, 25- and on each feature kind alone.
# Usage: bench/fidelity.sh [--configs "quickstart cpu-long"] [--n N]
#        [--device cpu] [--repeats R (default 5)]
#        (configs: names of files in configs/)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
configs="quickstart"
n=4000
device=cpu
repeats=5
# --simulator NAME (gflash, the default, or cascade): the simulator of both
# reference files and of the dataset each config trains on (a copy of the
# config with dataset.simulator set).
simulator=gflash
while [ $# -gt 0 ]; do
  case "$1" in
    --configs) configs=$2; shift 2 ;;
    --n) n=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --simulator) simulator=$2; shift 2 ;;
    *) echo "usage: $0 [--configs LIST] [--n N] [--device SPEC] [--repeats R]" \
            "[--simulator gflash|cascade]" >&2; exit 2 ;;
  esac
done
case "$simulator" in
  gflash|cascade) ;;
  *) echo "fidelity.sh: unknown simulator $simulator (gflash or cascade)" >&2; exit 2 ;;
esac
. "$root/bench/train_sample.sh"
bench_build fidelity
echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) threads," \
     "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')," \
     "$(grep -qw avx512_bf16 /proc/cpuinfo && echo AVX512-BF16 || (grep -qw avx512f /proc/cpuinfo && echo AVX-512 || echo AVX2))"
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg); $n showers per sample"

# another simulator's runs, references and results in a folder of their own,
# so a run of each can go side by side
if [ "$simulator" != gflash ]; then
  work="$work/$simulator"
  mkdir -p "$work"
fi
results="$work/results.tsv"
: > "$results"
for name in $configs; do
  cfg="$root/configs/$name.json"
  [ -f "$cfg" ] || { echo "fidelity.sh: no config $cfg" >&2; exit 2; }
  geo=$(/usr/bin/python3 -c "
import json, sys
g = json.load(open(sys.argv[1])).get('dataset', {}).get('geometry', 'dataset_2')
print(g if g.endswith('.xml') else sys.argv[2] + '/configs/geometry/binning_' + g + '.xml')" "$cfg" "$root")
  if [ "$simulator" != gflash ]; then
    /usr/bin/python3 -c "
import json, sys
c = json.load(open(sys.argv[1]))
c.setdefault('dataset', {})['simulator'] = sys.argv[2]
json.dump(c, open(sys.argv[3], 'w'), indent=2)" "$cfg" "$simulator" "$work/$name.$simulator.json"
    cfg="$work/$name.$simulator.json"
  fi
  for s in 99 98; do
    ref="$work/ref-$(basename "$geo" .xml)-$simulator-$s-$n.h5"
    [ -f "$ref" ] || "$giant" synth --geometry "$geo" --n "$n" --seed "$s" \
        --simulator "$simulator" -o "$ref" >/dev/null 2>&1
  done
  ref="$work/ref-$(basename "$geo" .xml)-$simulator-99-$n.h5"
  ref2="$work/ref-$(basename "$geo" .xml)-$simulator-98-$n.h5"
  bench_train_sample "$name" "$cfg" "$device" "$n" --device "$device"
  "$giant" sample --n "$n" --seed 1 -o "$work/$name-noaccept.h5" --db "$db" --device "$device" \
      --no-accept 2> "$work/$name-noaccept.sample.log"
  for acc in on off; do
    gen="$work/$name.h5"
    [ "$acc" = off ] && gen="$work/$name-noaccept.h5"
    "$giant" eval "$gen" "$ref" --ref2 "$ref2" --geometry "$geo" \
        --cls-repeats "$repeats" --json "$work/$name-$acc.eval.json" \
        > "$work/$name-$acc.eval.txt" 2> "$work/$name-$acc.eval.log"
    /usr/bin/python3 - "$work/$name-$acc.eval.json" "$work/$name.sample.log" "$name" "$t0" "$t1" \
        "$t2" "$n" "$acc" >> "$results" <<'PY'
import json, re, sys
ev, log, name, t0, t1, t2, n, acc = sys.argv[1:9]
e = json.load(open(ev))
f = e["floor"]
groups = {g: e["groups"][g]["mean"] / f["groups"][g]["mean"] for g in e["groups"]}
worst = max(groups, key=groups.get)
spec = {k: v / f["voxel_spectrum"]["features"][k]
        for k, v in e.get("voxel_spectrum", {}).get("features", {}).items()}
sworst = max(spec, key=spec.get) if spec else None
m = re.search(r"([0-9.]+) MFLOP", open(log).read())
def auc(d, k):
    c = d.get("classifier", {}).get(k)
    if not c:
        return "-"
    return "%.3f+-%.3f" % (c["auc"], c["auc_sd"]) if c.get("repeats", 1) > 1 else "%.3f" % c["auc"]
def cell(k):
    return "%s (%s)" % (auc(e, k), auc(f, k))
bd = e.get("breakdown", {}).get("subsets", {})
print("\t".join([name, acc, "%.0f" % (float(t1) - float(t0)),
                 "%.0f" % (int(n) / (float(t2) - float(t1))) if acc == "on" else "-",
                 m.group(1) if m else "-",
                 "%.1f" % (e["mean_over_groups"] / f["mean_over_groups"]),
                 "%.1f (%s)" % (groups[worst], worst),
                 "%.1f (%s)" % (spec[sworst], sworst) if sworst else "-",
                 cell("high"), cell("low"), cell("trees_high"), cell("trees_low"),
                 "  ".join("%s %.3f" % (k, v["auc"]) for k, v in bd.items())]))
PY
  done
  tail -2 "$results" | cut -f1-12
done
echo
printf "%-14s %-6s %7s %9s %12s %6s %-20s %-26s %-24s %-24s %-24s %-24s\n" config accept train_s \
       showers/s MFLOP/shower mean_x "worst_x (group)" "spec_x (feature)" "MLP hi (floor)" \
       "MLP lo (floor)" "trees hi (floor)" "trees lo (floor)"
awk -F'\t' '{printf "%-14s %-6s %7s %9s %12s %6s %-20s %-26s %-24s %-24s %-24s %-24s\n", $1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12}' "$results"
echo
echo "the trees' breakdown (AUC of the high-level trees on each part of the features):"
awk -F'\t' '{printf "%s, accept %s: %s\n", $1, $2, $13}' "$results"
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
