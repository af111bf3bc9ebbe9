#!/bin/bash
# deploy/Containerfile and the scripts the image and the pods run, without
# building the image (no registry can be reached here):
#  - the Containerfile parsed (dockerfile-parse when installed, and the
#    test's own reader) and checked: stages, ENTRYPOINT, non-root USER,
#    EXPOSE, HEALTHCHECK, settings, the build and runtime packages against
#    deploy/install-deps.sh and the libraries the built giant links
#    (k8s_check.py containerfile);
#  - against the real service from this build, on loopback: the image's
#    HEALTHCHECK script (deploy/healthcheck.sh) answers 0 while giant serve
#    runs and 1 after it stopped; the sampling replicas' init step
#    (deploy/k8s/pull-models.sh) pulls an imported model with a reader
#    token and gets the exact bytes `giant export` wrote, and fails, leaving
#    no file, on an unknown model, a wrong token and the Secret's placeholder.
set -u
# shellcheck source-path=SCRIPTDIR source=deploy_tools.sh
. "$(dirname "$0")/deploy_tools.sh"
giant="$bin/giant"
rc=0
fail() { echo "FAIL: $*"; rc=1; }

py=$(deploy_python) || skip "no python3 with the yaml module (Debian package python3-yaml)"
"$py" "$src/tests/deploy/k8s_check.py" containerfile "$src" "$giant" || rc=1
bash -n "$src/deploy/healthcheck.sh" || fail "deploy/healthcheck.sh does not parse"
sh -n "$src/deploy/k8s/pull-models.sh" || fail "deploy/k8s/pull-models.sh does not parse"

[ -x "$giant" ] || { echo "FAIL: $giant is not built"; exit 1; }
command -v curl >/dev/null || skip "no curl (the init container's tool): the scripts were not run against the service"

tmp=$(mktemp -d "$bin/test_k8s_container.XXXXXX")
pid=""
# shellcheck disable=SC2317  # called by the trap
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
cd "$tmp" || exit 1

# a tiny model (about 5 s on one core), exported, imported under a name,
# and a reader token: what an operator does on the trainer
cat >cfg.json <<'JSON'
{"name": "tiny", "dataset": {"geometry": "dataset_1_photons", "synthetic": {"n": 300, "seed": 1}},
 "model": {"stage1": {"trunk": {"hidden": 32, "blocks": 1, "emb_dim": 8}},
           "stage2": {"trunk": {"hidden": 32, "blocks": 1, "emb_dim": 8}}},
 "train": {"device": "cpu", "batch": 32, "steps": {"stage1": 4, "stage2": 4}, "warmup_steps": 2,
           "log_every": 2, "val_every": 2, "val_size": 32, "ckpt_every": 2},
 "sample": {"steps": 3}}
JSON
db="$tmp/t.db"
if ! { "$giant" train cfg.json --db "$db" --data-dir data --quiet >train.log 2>&1 &&
       "$giant" export 1 -o tiny.giant --db "$db" >export.log 2>&1 &&
       "$giant" import tiny.giant --name tiny --db "$db" >import.log 2>&1 &&
       "$giant" token create --name pull --role reader --db "$db" >reader.token 2>token.err; }; then
    cat ./*.log token.err
    echo "FAIL: could not make a model and a token to pull it with"
    exit 1
fi
token=$(cat reader.token)

port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export GIANT_LISTEN="127.0.0.1:$port"

# the HEALTHCHECK before the service runs: 1
if "$src/deploy/healthcheck.sh" 2>/dev/null; then
    fail "healthcheck.sh passed with nothing listening on $GIANT_LISTEN"
fi
"$giant" serve --db "$db" --data-dir data --default-dataset 0 >serve.log 2>&1 &
pid=$!
up=0
for _ in $(seq 1 100); do
    if "$src/deploy/healthcheck.sh" 2>/dev/null; then up=1; break; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
done
if [ $up = 1 ]; then
    echo "healthcheck.sh: 0 against giant serve on $GIANT_LISTEN"
else
    cat serve.log
    fail "healthcheck.sh never passed against giant serve on $GIANT_LISTEN"
fi
# the wildcard form the image uses (0.0.0.0:PORT) is asked on loopback
if ! GIANT_LISTEN="0.0.0.0:$port" "$src/deploy/healthcheck.sh"; then
    fail "healthcheck.sh with GIANT_LISTEN=0.0.0.0:$port"
fi

pull() {   # pull MODELS TOKEN DIR: the init container, as the pod runs it
    mkdir -p "$3"
    TRAINER_URL="http://127.0.0.1:$port/" MODELS="$1" MODELS_DIR="$3" PULL_TOKEN="$2" TMPDIR="$tmp" \
        sh "$src/deploy/k8s/pull-models.sh"
}
if pull tiny "$token" models >pull.log 2>&1 && cmp -s models/tiny.giant tiny.giant; then
    echo "pull-models.sh: model 'tiny' pulled, the bytes giant export wrote ($(wc -c <tiny.giant) bytes):"
    sed 's/^/  /' pull.log
else
    cat pull.log
    fail "pull-models.sh did not pull model 'tiny' byte for byte"
fi
for case in "nosuch|$token|an unknown model" \
            "tiny|gt_0000000000000000000000000000000000000000000000000000000000000000|a wrong token" \
            "tiny|REPLACE_WITH_A_READER_TOKEN|the Secret's placeholder"; do
    IFS='|' read -r m t why <<<"$case"
    d="refused-$RANDOM"
    if pull "$m" "$t" "$d" >refused.log 2>&1; then
        fail "pull-models.sh succeeded with $why"
    elif [ -n "$(ls -A "$d")" ]; then
        fail "pull-models.sh left files after failing with $why: $(ls "$d")"
    else
        echo "pull-models.sh: refused with $why: $(tail -n 1 refused.log)"
    fi
done
if grep -q "$token" pull.log refused.log; then
    fail "pull-models.sh printed the token"
fi

kill "$pid"
wait "$pid" 2>/dev/null
pid=""
if "$src/deploy/healthcheck.sh" 2>/dev/null; then
    fail "healthcheck.sh passed after giant serve stopped"
else
    echo "healthcheck.sh: 1 after giant serve stopped"
fi
[ $rc = 0 ] && echo "container: ok"
exit $rc
