#!/bin/bash
# Every manifest of deploy/k8s against the OpenAPI schemas of one stated
# Kubernetes version (kubernetes-validate --strict: unknown fields are
# errors), and the YAML linted (yamllint, deploy/k8s/.yamllint). When
# kubectl is installed the kustomization is rendered (`kubectl kustomize`,
# offline) and the rendered objects validated too. Shell scripts of deploy/
# go through shellcheck when it is installed.
#
# GIANT_K8S_VERSION overrides the version (default 1.29.0: the oldest one
# still commonly run that has every API used: apps/v1, policy/v1,
# autoscaling/v2). Skips (77) when kubernetes-validate cannot be
# installed, after the lint.
set -u
# shellcheck source-path=SCRIPTDIR source=deploy_tools.sh
. "$(dirname "$0")/deploy_tools.sh"
version=${GIANT_K8S_VERSION:-1.29.0}
kdir="$src/deploy/k8s"
rc=0

# -- the YAML lint --------------------------------------------------------
if command -v yamllint >/dev/null; then
    if yamllint -s -c "$kdir/.yamllint" "$kdir"; then
        echo "yamllint: deploy/k8s clean ($(yamllint --version))"
    else
        echo "FAIL: yamllint"
        rc=1
    fi
else
    echo "FAIL: yamllint is not installed (Debian package yamllint; deploy/install-deps.sh installs it)"
    rc=1
fi

# -- shellcheck, when there -----------------------------------------------
if command -v shellcheck >/dev/null; then
    if shellcheck "$kdir/pull-models.sh" "$src/deploy/healthcheck.sh" "$src/deploy/install-deps.sh" &&
       (cd "$src/tests/deploy" && shellcheck -x ./*.sh); then
        echo "shellcheck: deploy scripts clean"
    else
        echo "FAIL: shellcheck"
        rc=1
    fi
else
    echo "NOTE: shellcheck is not installed: the deploy scripts were not linted"
fi

# -- the schemas --------------------------------------------------------------
venv=$(deploy_venv) || {
    [ $rc -eq 0 ] || exit 1
    skip "kubernetes-validate could not be installed from PyPI (see above): the manifests were linted and NOT checked against the Kubernetes $version schemas"
}
kv="$venv/bin/kubernetes-validate"
echo "kubernetes-validate $("$kv" --version), Kubernetes $version, strict"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_k8s_schema.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# The validator must refuse what is wrong, or a pass proves nothing.
cat >"$tmp/wrong.yaml" <<'YAML'
apiVersion: apps/v1
kind: Deployment
metadata:
  name: wrong
spec:
  replicas: "two"
  selector: {matchLabels: {a: b}}
  template:
    metadata: {labels: {a: b}}
    spec:
      containers:
        - name: c
          image: x
          readinessProbe: {httpGet: {path: /readyz, port: http}, periodSecond: 5}
YAML
if "$kv" --strict --quiet -k "$version" "$tmp/wrong.yaml" >"$tmp/wrong.out" 2>&1; then
    echo "FAIL: kubernetes-validate accepted a Deployment with a string replica count and an unknown probe field"
    rc=1
else
    echo "kubernetes-validate refuses a wrong Deployment, as it should: $(head -c 160 "$tmp/wrong.out")"
fi

n=0
for f in "$kdir"/*.yaml; do
    [ "$(basename "$f")" = kustomization.yaml ] && continue   # kustomize's, not an API object
    if out=$("$kv" --strict -k "$version" "$f" 2>&1); then
        echo "$out"
        n=$((n + 1))
    else
        echo "$out"
        echo "FAIL: $f against Kubernetes $version"
        rc=1
    fi
done
echo "kubernetes-validate: $n files checked"

# -- the kustomization, rendered ------------------------------------------
if command -v kubectl >/dev/null && kubectl kustomize "$kdir" >"$tmp/rendered.yaml" 2>"$tmp/kustomize.err"; then
    if out=$("$kv" --strict -k "$version" "$tmp/rendered.yaml" 2>&1); then
        echo "kubectl kustomize: $(grep -c '^kind:' "$tmp/rendered.yaml") objects rendered, all valid"
        # every object in the namespace, and the generated script's name
        # substituted where the Deployment mounts it
        if grep -q '^  namespace: giant$' "$tmp/rendered.yaml" &&
           grep -Eq 'name: giant-pull-models-script-[a-z0-9]+$' "$tmp/rendered.yaml" &&
           grep -q 'image: registry.example.org/giant:0.1.0' "$tmp/rendered.yaml"; then
            echo "kubectl kustomize: namespace, generated ConfigMap name and image applied"
        else
            echo "FAIL: the rendered kustomization lacks the namespace, the generated name or the image"
            rc=1
        fi
    else
        echo "$out"
        echo "FAIL: the rendered kustomization against Kubernetes $version"
        rc=1
    fi
elif command -v kubectl >/dev/null; then
    cat "$tmp/kustomize.err"
    echo "FAIL: kubectl kustomize deploy/k8s"
    rc=1
else
    echo "NOTE: kubectl is not installed: the kustomization was not rendered (its file list is checked by test_k8s_interface)"
fi
exit $rc
