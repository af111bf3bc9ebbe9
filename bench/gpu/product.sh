#!/bin/sh
# The product on a device, end to end, the way a user runs it: the real
# trainer (giant train), the production sampler (giant sample) and the
# service (giant serve, a run trained through the API, showers over
# loopback in the binary format).  bench/gpu.sh runs it after the suite;
# it runs anywhere giant was built (GIANT_PRODUCT_DEVICE=cpu proves the
# script on a machine without a GPU, at small sizes with --small).
#
#   1. trainer: the baseline shape (stage 2 an expert trunk 512 x 6, batch
#      4096, configs/baseline.json) on synthetic dataset-2 showers, fp32
#      with Heun and bf16 with Euler, and configs/wgan.json's generator in
#      fp32: stage 2's samples/s at its last report (validation left out),
#      wall seconds, and the most device memory nvidia-smi saw in use
#      beyond what it saw before (so the CUDA context is included);
#   2. sampler: 65 536 showers of each run (20 steps for the flows) at
#      batch 4096, 16 384 and 65 536 (the WGAN at 16 384), written as
#      CaloChallenge HDF5 to a RAM folder: giant sample's showers/s, which
#      counts everything from loading the run to the file closed;
#   3. service: giant serve on the device, a short run submitted with POST
#      /v1/runs and followed to "succeeded", then 4 096 showers asked twice
#      with Accept: application/octet-stream over loopback (size, magic and
#      the same bytes both times checked; seconds as curl saw them).
# Rows for bench/gpu/summary.py: "RESULT name ms 0 per_s" and
# "MEMORY name MiB"; "PRODUCT ok|FAIL what" lines say what worked.
# Exit 0 only when every part worked.
#
# Usage: bench/gpu/product.sh GIANT WORKDIR [--small]
#   GIANT_PRODUCT_DEVICE  the device every part uses (cuda:0)
#   GIANT_ORIG_LD         the library path python3 (h5py) runs with (default: none)
set -u
giant=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
work=$2
small=0
[ "${3:-}" = --small ] && small=1
root=$(cd "$(dirname "$0")/../.." && pwd)
dev=${GIANT_PRODUCT_DEVICE:-cuda:0}
rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 1
db=$work/product.db
fail=0
say() { echo "PRODUCT $*"; case $1 in ok) ;; *) fail=1 ;; esac; }
# a RAM folder for the sampler's files, so that the disk is not what is timed
shm=$work
[ -d /dev/shm ] && [ -w /dev/shm ] && shm=$(mktemp -d /dev/shm/giant-product.XXXXXX)
trap 'rm -rf "$shm/"*.h5; [ "$shm" != "$work" ] && rm -rf "$shm"' EXIT
trap 'exit 143' INT TERM

if [ "$small" = 1 ]; then
    n_data=3000 s1=20 s2=40 hidden=64 blocks=1 batch=256 n_sample=2048 batches="256 1024"
else
    n_data=24576 s1=200 s2=400 hidden=512 blocks=6 batch=4096 n_sample=65536 batches="4096 16384 65536"
fi

# CONFIG.json NAME PRECISION SOLVER: a copy of a shipped config at this size
mkconfig() {
    python3 - "$root/configs/$1" "$2" "$3" "$4" "$dev" "$n_data" "$s1" "$s2" "$hidden" "$blocks" \
        "$batch" >"$2.json" <<'EOF'
import json, sys
src, name, prec, solver, dev, n, s1, s2, hidden, blocks, batch = sys.argv[1:]
c = json.load(open(src))
c["name"] = name
c["dataset"]["synthetic"]["n"] = int(n)
t = c["model"]["stage2"].get("trunk")
if t and c["model"]["stage2"].get("objective") != "wgan":
    t["hidden"], t["blocks"] = int(hidden), int(blocks)
c["train"].update(precision=prec, device=dev, batch=int(batch), log_every=20,
                  steps={"stage1": int(s1), "stage2": int(s2)}, val_every=int(s2) // 2,
                  ckpt_every=int(s2) // 2, val_size=min(4096, int(n) // 10))
if solver != "-":
    c.setdefault("sample", {})["solver"] = solver
    c["sample"]["steps"] = 20
json.dump(c, sys.stdout, indent=1)
EOF
}

# the device memory in use (MiB) every 100 ms while a command runs; prints
# the command's output to LOG and echoes the peak beyond the first reading
watch_mem() {
    log=$1
    shift
    mem="$work/mem.$$"
    : >"$mem"
    if command -v nvidia-smi >/dev/null && [ "${dev#cuda}" != "$dev" ]; then
        nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 >"$mem" 2>/dev/null &
        smi=$!
    else
        smi=
    fi
    sleep 0.3
    "$@" >"$log" 2>&1
    rc=$?
    [ -n "$smi" ] && kill "$smi" 2>/dev/null && wait "$smi" 2>/dev/null
    peak=$(awk 'NR == 1 { b = $1 } $1 + 0 > m { m = $1 } END { if (NR) print m - b; else print 0 }' "$mem")
    return $rc
}

# ---------------------------------------------------------------------------
# 1. the trainer
# ---------------------------------------------------------------------------
run=0
runs=""
s1_all=$s1 s2_all=$s2
for spec in "baseline.json fp32 heun" "baseline.json bf16 euler" "wgan.json fp32 -"; do
    # shellcheck disable=SC2086
    set -- $spec
    # the WGAN's critic steps make its generator steps several times dearer:
    # fewer of them (it is timed, not judged, here)
    s1=$s1_all s2=$s2_all
    case $1 in wgan*) s1=$((s1_all / 2)) s2=$((s2_all / 8)) ;; esac
    name=$(echo "$1" | sed 's/\.json$//')-$2
    [ "$3" != - ] && name=$name-$3
    mkconfig "$1" "$name" "$2" "$3" || { say FAIL "config $name"; continue; }
    t0=$(date +%s.%N)
    if watch_mem "train-$name.log" env OMP_WAIT_POLICY=PASSIVE "$giant" train "$name.json" \
            --db "$db" --device "$dev"; then
        run=$((run + 1))
        secs=$(echo "$t0 $(date +%s.%N)" | awk '{ printf "%.1f", $2 - $1 }')
        sps=$(grep -o 'stage 2 step [0-9]*/[0-9]*  loss [^ ]*  [0-9]* samples/s' "train-$name.log" |
              tail -1 | awk '{ print $(NF - 1) }')
        ms=$(echo "${sps:-0} $batch" | awk '{ if ($1 > 0) printf "%.3f", 1000 * $2 / $1; else print 0 }')
        echo "RESULT trainer_$name $ms 0 ${sps:-0}"
        echo "MEMORY trainer_$name $peak"
        say ok "giant train $name on $dev: ${secs}s, stage 2 ${sps:-?} samples/s, peak +${peak} MiB"
        runs="$runs $run:$name"
    else
        say FAIL "giant train $name on $dev (exit $rc): $(tail -3 "train-$name.log" | tr '\n' ' ')"
        # the run still took a number in the database if it was recorded
        run=$(sqlite3 "$db" 'SELECT max(id) FROM runs' 2>/dev/null || echo "$run")
    fi
done

# ---------------------------------------------------------------------------
# 2. the production sampler
# ---------------------------------------------------------------------------
# a python3 with h5py compares the files (the first on the path, else Debian's)
py=python3
env LD_LIBRARY_PATH="${GIANT_ORIG_LD-}" python3 -c 'import h5py' 2>/dev/null || py=/usr/bin/python3
for rn in $runs; do
    id=${rn%%:*} name=${rn#*:}
    case $name in wgan*) bs=$(echo "$batches" | awk '{ print $(NF > 1 ? 2 : 1) }') ;; *) bs=$batches ;; esac
    ref=
    for b in $bs; do
        out="$shm/s-$id-$b.h5"
        if "$giant" sample --db "$db" --run "$id" --n "$n_sample" --batch "$b" --seed 1 \
                --device "$dev" -o "$out" >"sample-$name-$b.log" 2>&1; then
            sps=$(sed -n 's/.*(\([0-9.]*\) showers\/s.*/\1/p' "sample-$name-$b.log" | tail -1)
            mflop=$(sed -n 's/.*, \([0-9.]*\) MFLOP.*/\1/p' "sample-$name-$b.log" | tail -1)
            ms=$(echo "${sps:-0} $n_sample" | awk '{ if ($1 > 0) printf "%.1f", 1000 * $2 / $1; else print 0 }')
            echo "RESULT giant_sample_${name}_b$b $ms 0 ${sps:-0}"
            say ok "giant sample run $id ($name) batch $b: ${sps:-?} showers/s, ${mflop:-?} MFLOP a shower"
            # where the time went, and the production sampler's own rate:
            # the networks and the copies back, without decoding and writing
            grep '^time:' "sample-$name-$b.log" | sed "s/^/   $name batch $b: /"
            dev_s=$(sed -n 's/.*the networks and copies back \([0-9.]*\) s.*/\1/p' \
                "sample-$name-$b.log" | tail -1)
            echo "${dev_s:-0} $n_sample" | awk -v n="sampler_device_${name}_b$b" \
                '$1 > 0 { printf "RESULT %s %.1f 0 %.0f\n", n, 1000 * $1, $2 / $1 }'
            # the promise: the same showers whatever the batch
            if [ -z "$ref" ]; then
                ref=$out refb=$b
            elif same=$(env LD_LIBRARY_PATH="${GIANT_ORIG_LD-}" "$py" - "$ref" "$out" 2>&1 <<'EOF'
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:3])
same = all(np.array_equal(a[k][...].view(np.uint32), b[k][...].view(np.uint32))
           for k in ("incident_energies", "showers"))
print(f"{a['showers'].shape[0]} showers, {'the same bits' if same else 'DIFFERENT bits'}")
sys.exit(0 if same else 1)
EOF
            ); then
                say ok "giant sample run $id ($name): batch $b and batch $refb give $same"
            else
                say FAIL "giant sample run $id ($name): batch $b against batch $refb: $same"
            fi
        else
            say FAIL "giant sample run $id ($name) batch $b: $(tail -3 "sample-$name-$b.log" | tr '\n' ' ')"
        fi
        [ "$out" != "$ref" ] && rm -f "$out"
    done
    [ -n "$ref" ] && rm -f "$ref"
done

# ---------------------------------------------------------------------------
# 3. the service
# ---------------------------------------------------------------------------
svc_log=$work/serve.log
"$giant" serve --listen 127.0.0.1:0 --db "$work/svc.db" --data-dir "$work/svc-data" \
    --device "$dev" >"$svc_log" 2>&1 &
svc=$!
url=
i=0
while [ $i -lt 100 ] && [ -z "$url" ]; do
    url=$(sed -n 's/.*msg=listening addr=\([0-9.:]*\).*/http:\/\/\1/p' "$svc_log" | head -1)
    [ -z "$url" ] && sleep 0.1
    i=$((i + 1))
done
if [ -z "$url" ]; then
    say FAIL "giant serve did not start: $(tail -3 "$svc_log" | tr '\n' ' ')"
else
    # the quickstart's model (the defaults), bf16 on a GPU
    prec=bf16
    [ "${dev#cuda}" = "$dev" ] && prec=fp32
    python3 - "$n_data" "$s1" "$s2" "$prec" >svc-run.json <<'EOF'
import json, sys
n, s1, s2 = (int(a) for a in sys.argv[1:4])
print(json.dumps({"name": "product", "dataset": {"geometry": "dataset_2",
      "synthetic": {"n": min(n, 8192), "seed": 1}},
      "train": {"precision": sys.argv[4], "batch": 1024, "val_size": 512,
                "steps": {"stage1": s1, "stage2": s2}}}))
EOF
    code=$(curl -s -o submit.json -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
        --data-binary @svc-run.json "$url/v1/runs")
    rid=$(python3 -c 'import json,sys; print(json.load(open("submit.json")).get("id", ""))' 2>/dev/null)
    st=
    if [ "$code" = 201 ] || [ "$code" = 202 ]; then
        i=0
        while [ $i -lt 600 ]; do
            st=$(curl -s "$url/v1/runs/$rid" |
                 python3 -c 'import json,sys; print(json.load(sys.stdin).get("status", ""))' 2>/dev/null)
            case $st in succeeded|failed|cancelled) break ;; esac
            sleep 0.2
            i=$((i + 1))
        done
    fi
    if [ "$st" != succeeded ]; then
        say FAIL "service run: POST /v1/runs answered $code ($(head -c 300 submit.json)), status '$st'"
    else
        say ok "service run $rid trained on $dev through the API: $(grep -o "msg=run id=$rid status=succeeded[^\n]*" "$svc_log" | head -1)"
        n=4096
        [ "$small" = 1 ] && n=256
        for k in 1 2; do
            tt=$(curl -s -o "svc-$k.bin" -w '%{http_code} %{time_total} %{size_download}' -X POST \
                -H 'Content-Type: application/json' -H 'Accept: application/octet-stream' \
                --data "{\"count\": $n, \"seed\": 5}" "$url/v1/runs/$rid/samples")
            echo "service samples $k: $tt"
        done
        # header 20 + 4 L bytes (dataset 2: L = 45), energies 4 n, showers 4 n V (V = 6480)
        want=$((20 + 4 * 45 + 4 * n + 4 * n * 6480))
        got=$(wc -c <svc-1.bin)
        secs=$(echo "$tt" | awk '{ print $2 }')
        if [ "$(head -c 4 svc-1.bin)" = GSHW ] && [ "$got" = "$want" ] && cmp -s svc-1.bin svc-2.bin; then
            rate=$(echo "$n $secs" | awk '{ printf "%.0f", $1 / $2 }')
            echo "RESULT service_binary_$n $(echo "$secs" | awk '{ printf "%.1f", 1000 * $1 }') 0 $rate"
            say ok "service: $n showers over loopback, binary, $got bytes, the same both times, ${secs}s the second time"
        else
            say FAIL "service samples: $(head -c 4 svc-1.bin) $got bytes (want $want), same: $(cmp -s svc-1.bin svc-2.bin && echo yes || echo no); $(head -c 300 svc-1.bin | tr -cd '[:print:]')"
        fi
    fi
    kill -TERM "$svc" 2>/dev/null
    wait "$svc" 2>/dev/null
    if grep -q 'msg=stopped clean=1' "$svc_log"; then
        say ok "giant serve stopped clean"
    else
        say FAIL "giant serve did not stop clean: $(tail -2 "$svc_log" | tr '\n' ' ')"
    fi
fi
exit "$fail"
