#!/bin/sh
# Installs the Debian 12 packages giant needs to build, test and run.
# Idempotent: packages already present are left alone. Needs root (or sudo).
set -eu

PKGS="build-essential cmake pkg-config git curl
libmicrohttpd-dev libjansson-dev libsqlite3-dev sqlite3
libopenblas-dev libdnnl-dev libhdf5-dev libxml2-dev libcurl4-openssl-dev libssl-dev zlib1g-dev
python3 python3-numpy python3-torch python3-h5py
chromium haproxy"

missing=""
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done

if [ -z "$missing" ]; then
    echo "install-deps: all packages present"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing$missing"
$SUDO apt-get update
# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends $missing
