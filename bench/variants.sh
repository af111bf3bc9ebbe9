#!/bin/sh
# Compares the model variants on the first quickstart budget: configs/quickstart.json
# (20 000 simulated dataset-2 showers, stage-2 trunk 256 x 3) trained for
# 1 500 + 3 000 steps at batch 256 (what the table in the README was measured
# with; the quickstart itself now trains 4x the stage-2 rows), with stage 2
# switched to each variant, in fp32 and bf16.
# For each: training wall time, final fp32 validation loss per stage, sampling
# speed, and the giant eval summary of N samples against held-out simulated
# showers.  Usage: bench/variants.sh [--n N] [--only "flow routed ..."]
#                                    [--precisions "fp32 bf16"] [--steps2 S]
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
n=2000
only="flow routed autoregressive wgan"
precisions="fp32 bf16"
steps2=""
while [ $# -gt 0 ]; do
  case "$1" in
    --n) n=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --precisions) precisions=$2; shift 2 ;;
    --steps2) steps2=$2; shift 2 ;;
    *) echo "usage: $0 [--n N] [--only LIST] [--precisions LIST] [--steps2 S]" >&2; exit 2 ;;
  esac
done
. "$root/bench/train_sample.sh"
bench_build variants -DGIANT_CUDA=OFF
geo="$root/configs/geometry/binning_dataset_2.xml"
[ -f "$work/ref.h5" ] || "$giant" synth --geometry "$geo" --n "$n" --seed 99 -o "$work/ref.h5" >/dev/null 2>&1

results="$work/results.tsv"
: > "$results"
for v in $only; do
  for p in $precisions; do
    name="$v-$p"
    cfg="$work/$name.json"
    /usr/bin/python3 - "$root/configs/quickstart.json" "$v" "$p" "$steps2" > "$cfg" <<'PY'
import json, sys
cfg = json.load(open(sys.argv[1]))
variant, precision, steps2 = sys.argv[2], sys.argv[3], sys.argv[4]
s2 = cfg["model"]["stage2"]
# the quickstart is autoregressive (6 Heun steps); the oneshot variants
# sample with the 20 Heun steps they were measured with
s2["mode"] = "autoregressive" if variant == "autoregressive" else "oneshot"
# the 256-wide trunk its figures were measured with (the quickstart's is 192 since 2026-12-06)
s2["trunk"]["hidden"] = 256
if variant != "autoregressive":
    cfg["sample"] = {"solver": "heun", "steps": 20}
    s2.pop("history", None)  # conditions of layer tokens: autoregressive only
if variant == "routed":
    s2["trunk"].update({"kind": "routed", "experts": 4, "top_k": 2})
elif variant == "wgan":
    s2["objective"] = "wgan"
cfg["train"]["precision"] = precision
cfg["train"]["batch"] = 256
cfg["train"]["steps"]["stage2"] = int(steps2) if steps2 else 3000
cfg["name"] = "quickstart-%s-%s" % (variant, precision)
json.dump(cfg, sys.stdout, indent=1)
PY
    bench_train_sample "$name" "$cfg" cpu "$n"
    "$giant" eval "$work/$name.h5" "$work/ref.h5" --geometry "$geo" --json "$work/$name.eval.json" \
        > "$work/$name.eval.txt" 2>&1
    /usr/bin/python3 - "$db" "$work/$name.eval.json" "$name" "$t0" "$t1" "$t2" "$n" >> "$results" <<'PY'
import json, sqlite3, sys
db, ev, name, t0, t1, t2, n = sys.argv[1:8]
con = sqlite3.connect(db)
val = {}
for stage, loss in con.execute(
        "SELECT stage, loss FROM val_losses v WHERE step = (SELECT MAX(step) FROM val_losses"
        " w WHERE w.run_id = v.run_id AND w.stage = v.stage)"):
    val[stage] = loss
e = json.load(open(ev))
def find(d, *keys):
    for k in keys:
        if isinstance(d, dict) and k in d:
            d = d[k]
        else:
            return float("nan")
    return d
allmean = find(e, "summary", "mean")
elayer = find(e, "groups", "E_layer", "mean")
fpd = e.get("fpd_x1e3", float("nan"))
print("\t".join([name, "%.0f" % (float(t1) - float(t0)), "%.4f" % val.get("energy", float("nan")),
                 "%.4f" % val.get("shower", float("nan")),
                 "%.0f" % (int(n) / (float(t2) - float(t1))), "%.4f" % allmean,
                 "%.4f" % elayer, "%.1f" % fpd]))
PY
    tail -1 "$results"
  done
done
echo
echo "variant             train_s  val1     val2     showers/s  sep_all  sep_E_layer  FPDx1e3"
awk -F'\t' '{printf "%-19s %7s  %-7s  %-7s  %9s  %-7s  %-11s  %s\n", $1,$2,$3,$4,$5,$6,$7,$8}' "$results"
