#!/bin/sh
# Installs the Debian 12 packages giant needs to build, test and run.
# Idempotent: packages already present are left alone. Needs root (or sudo).
# clang and libclang-rt-14-dev build the libFuzzer targets (tests/fuzz/);
# the project itself builds with gcc.  slurmctld, slurmd, slurm-client and
# munge: the Slurm executor's client commands and its integration test,
# which starts its own daemons; installing them must start none (below).
#
# Then the deploy tests' Python tools, which Debian does not package, into a
# virtualenv beside the checkout (.venv-deploy, ignored by git):
# kubernetes-validate (the Kubernetes manifests' schemas) and
# dockerfile-parse (the Containerfile). Without network that step only
# warns: the tests that need them then skip and say why.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)

PKGS="build-essential cmake pkg-config git curl
libmicrohttpd-dev libjansson-dev libsqlite3-dev sqlite3
libopenblas-dev libdnnl-dev libhdf5-dev libxml2-dev libcurl4-openssl-dev libssl-dev zlib1g-dev libdeflate-dev libxgboost-dev
python3 python3-numpy python3-torch python3-h5py python3-sklearn
python3-yaml python3-venv yamllint shellcheck python3-prometheus-client
chromium haproxy
clang libclang-rt-14-dev
slurmctld slurmd slurm-client munge"

# the deploy tests' tools from PyPI, pinned (deploy/README.md, the Kubernetes checks)
VENV_PKGS="kubernetes-validate==1.37.0 dockerfile-parse==2.0.1"

missing=""
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done

if [ -z "$missing" ]; then
    echo "install-deps: all packages present"
else
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    echo "install-deps: installing$missing"
    $SUDO apt-get update
    # No service starts during the installation: munge's and Slurm's
    # packages would start system-wide daemons (the tests start their own,
    # with private keys and ports).  A policy-rc.d that refuses every start
    # does that; one already there (containers have one) is left alone.
    policy=/usr/sbin/policy-rc.d
    added_policy=""
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
        $SUDO chmod 0755 "$policy"
        added_policy=1
    fi
    installed=1
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends $missing ||
        installed=""
    if [ -n "$added_policy" ]; then
        $SUDO rm -f "$policy"
    fi
    if [ -z "$installed" ]; then
        exit 1
    fi
fi

venv="${GIANT_DEPLOY_VENV:-$root/.venv-deploy}"
if [ -x "$venv/bin/kubernetes-validate" ] && [ -f "$venv/.pinned" ] &&
   [ "$(cat "$venv/.pinned")" = "$VENV_PKGS" ]; then
    echo "install-deps: deploy tools present ($venv)"
    exit 0
fi
py=/usr/bin/python3
[ -x "$py" ] || py=python3
echo "install-deps: deploy tools into $venv: $VENV_PKGS"
# shellcheck disable=SC2086
if "$py" -m venv "$venv" &&
   "$venv/bin/pip" install --quiet --disable-pip-version-check $VENV_PKGS; then
    echo "$VENV_PKGS" >"$venv/.pinned"
else
    echo "install-deps: WARNING: could not install $VENV_PKGS from PyPI;" \
         "the Kubernetes schema test will skip" >&2
fi
