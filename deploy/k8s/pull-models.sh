#!/bin/sh
# Init container of the sampling replicas: pulls each model named in MODELS
# from the trainer into MODELS_DIR, as NAME.giant, before the replica starts.
#
#   TRAINER_URL  base URL of the trainer (http://giant-trainer-0.giant-trainer:8080)
#   MODELS       space-separated model names, as imported on the trainer
#   MODELS_DIR   where the files go (the pod's emptyDir)
#   PULL_TOKEN   a token of the reader role or above (GET /v1/models/{name}/file)
#
# Each file is written beside its final name and renamed only after its
# sha256 matched the X-Checksum-SHA256 header the trainer sends, so the
# replica never sees a partial or damaged file. Any failure exits non-zero:
# the kubelet retries the init container and the replica is never ready
# without its models. Needs only sh, curl, sha256sum, tr and sed.
set -eu

: "${TRAINER_URL:?TRAINER_URL is not set}"
: "${MODELS:?MODELS is not set: name at least one model}"
: "${MODELS_DIR:?MODELS_DIR is not set}"
: "${PULL_TOKEN:?PULL_TOKEN is not set}"

case $PULL_TOKEN in
    REPLACE*) echo "pull-models: the Secret giant-tokens still holds its placeholder: put a reader token in model-pull-token" >&2
              exit 1 ;;
esac

tmp=${TMPDIR:-/tmp}
hdr="$tmp/pull-models.headers"
auth="$tmp/pull-models.auth"
# the token goes to curl in a file (-H @file), never on a command line
umask 077
printf 'Authorization: Bearer %s\n' "$PULL_TOKEN" >"$auth"
trap 'rm -f "$hdr" "$auth"' EXIT

n=0
for name in $MODELS; do
    case $name in
        *[!A-Za-z0-9._-]*|.*) echo "pull-models: '$name' is not a model name this script pulls" >&2
                              exit 1 ;;
    esac
    out="$MODELS_DIR/$name.giant"
    part="$out.part"
    url="${TRAINER_URL%/}/v1/models/$name/file"
    echo "pull-models: $url -> $out"
    # --retry covers a trainer that is restarting; --fail turns 4xx/5xx
    # (401 bad token, 404 no such model) into an error.
    if ! curl --silent --show-error --fail --location --retry 10 --retry-delay 3 \
              --retry-connrefused --max-time 600 -H @"$auth" -D "$hdr" -o "$part" "$url"; then
        rm -f "$part"
        echo "pull-models: could not fetch model '$name' from $url" >&2
        exit 1
    fi
    want=$(tr -d '\r' <"$hdr" | sed -n 's/^[Xx]-[Cc]hecksum-[Ss][Hh][Aa]256: *//p' | tail -n 1)
    have=$(sha256sum "$part" | cut -d' ' -f1)
    if [ -z "$want" ]; then
        rm -f "$part"
        echo "pull-models: $url sent no X-Checksum-SHA256 header" >&2
        exit 1
    fi
    if [ "$want" != "$have" ]; then
        rm -f "$part"
        echo "pull-models: model '$name': sha256 $have, the trainer said $want" >&2
        exit 1
    fi
    mv -f "$part" "$out"
    echo "pull-models: model '$name': $(wc -c <"$out" | tr -d ' ') bytes, sha256 $have"
    n=$((n + 1))
done
echo "pull-models: $n model(s) in $MODELS_DIR"
