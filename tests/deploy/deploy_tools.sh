# shellcheck shell=bash
# Sourced by the deploy tests: where the sources and the build are, the
# skip convention (exit 77, which ctest reports as skipped, with the reason
# on stdout), and the Python tools from PyPI (kubernetes-validate,
# dockerfile-parse) in a virtualenv: the one deploy/install-deps.sh made
# (.venv-deploy beside the sources), else one this build makes for itself
# (deploy-venv in the build directory), with the same pinned versions.
src=${GIANT_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
bin=${GIANT_BINARY_DIR:-$src/build}

skip() {
    echo "SKIPPED: $*"
    exit 77
}

# the pinned list, read from deploy/install-deps.sh so it is written once
venv_pkgs() {
    sed -n 's/^VENV_PKGS="\(.*\)"$/\1/p' "$src/deploy/install-deps.sh"
}

# Prints the virtualenv's folder; makes one in the build directory when
# none has kubernetes-validate. Fails (status 1, reason on stderr) when it
# cannot be installed (no python3 venv module, no PyPI).
deploy_venv() {
    local v
    for v in "${GIANT_DEPLOY_VENV:-}" "$src/.venv-deploy" "$bin/deploy-venv"; do
        if [ -n "$v" ] && [ -x "$v/bin/kubernetes-validate" ]; then
            echo "$v"
            return 0
        fi
    done
    v="$bin/deploy-venv"
    local py=/usr/bin/python3
    [ -x "$py" ] || py=python3
    local pkgs
    pkgs=$(venv_pkgs)
    [ -n "$pkgs" ] || { echo "deploy/install-deps.sh has no VENV_PKGS line" >&2; return 1; }
    echo "deploy tools: installing $pkgs into $v" >&2
    rm -rf "$v"
    if ! "$py" -m venv "$v" >&2; then
        echo "python3 -m venv failed (Debian package python3-venv)" >&2
        return 1
    fi
    # shellcheck disable=SC2086
    if ! timeout 240 "$v/bin/pip" install --quiet --disable-pip-version-check \
            --timeout 15 --retries 1 $pkgs >&2; then
        echo "pip could not install $pkgs (no PyPI?)" >&2
        rm -rf "$v"
        return 1
    fi
    echo "$v"
}

# A python3 that has yaml, dockerfile-parse when the venv is there.
deploy_python() {
    local v
    for v in "${GIANT_DEPLOY_VENV:-}" "$src/.venv-deploy" "$bin/deploy-venv"; do
        if [ -n "$v" ] && [ -x "$v/bin/python" ] && "$v/bin/python" -c 'import yaml' 2>/dev/null; then
            echo "$v/bin/python"
            return 0
        fi
    done
    for p in /usr/bin/python3 python3; do
        if command -v "$p" >/dev/null && "$p" -c 'import yaml' 2>/dev/null; then
            command -v "$p"
            return 0
        fi
    done
    return 1
}
