#!/bin/bash
# deploy/k8s against the service's real interface, read from its sources:
# every GIANT_* variable is a setting of server/base/settings.c, every probe a
# tokenless GET route of server/routes/routes.c, the port the default, selectors
# and references resolve, the trainer holds its state on a volume with one
# GPU, pods are non-root, the Secret holds placeholders (k8s_check.py says
# each check). Needs python3 with yaml only.
set -u
# shellcheck source-path=SCRIPTDIR source=deploy_tools.sh
. "$(dirname "$0")/deploy_tools.sh"
py=$(deploy_python) || skip "no python3 with the yaml module (Debian package python3-yaml)"
exec "$py" "$src/tests/deploy/k8s_check.py" manifests "$src"
