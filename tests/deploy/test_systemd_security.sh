#!/bin/bash
# deploy/giant.service under `systemd-analyze security --offline=yes`: the
# overall exposure must stay under 3.0 ("OK"; it was 7.6 "EXPOSED" before the
# unit was hardened), and the settings the service depends on must be there
# (its state directory writable under ProtectSystem=strict, the NVIDIA
# devices open under the closed device policy, the sockets it needs).
# systemd-analyze (systemd >= 250 for --offline and --threshold) is only
# read, never run against a live manager: it works without systemd running.
set -u
# shellcheck source-path=SCRIPTDIR source=deploy_tools.sh
. "$(dirname "$0")/deploy_tools.sh"
unit="$src/deploy/giant.service"
max=30   # --threshold counts tenths: 30 = an exposure of 3.0
rc=0
fail() { echo "FAIL: $*"; rc=1; }

command -v systemd-analyze >/dev/null || skip "no systemd-analyze (Debian package systemd)"
systemd-analyze security --help 2>/dev/null | grep -q -- '--offline' ||
    skip "systemd-analyze has no --offline (systemd < 250): $(systemd-analyze --version | head -1)"

out=$(systemd-analyze security --offline=yes --threshold=$max "$unit" 2>&1)
st=$?
score=$(printf '%s\n' "$out" | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\) .*/\1/p')
echo "deploy/giant.service: exposure $score (must be <= 3.0)"
[ -n "$score" ] || fail "no overall exposure in the output: $out"
[ "$st" = 0 ] || { printf '%s\n' "$out" | grep '✗'; fail "exposure $score is over 3.0 (systemd-analyze exit $st)"; }

# the threshold really bites: the unit without its hardening scores higher
bare="$(mktemp -d)/giant.service"
trap 'rm -rf "$(dirname "$bare")"' EXIT
sed '/^# Hardening/,/^\[Install\]/{/^\[Install\]/!d}' "$unit" >"$bare"
if systemd-analyze security --offline=yes --threshold=$max "$bare" >/dev/null 2>&1; then
    fail "the unit stripped of its hardening also passes: the check proves nothing"
fi

# what the service needs must survive any later tightening
need() { grep -qx -- "$1" "$unit" || fail "deploy/giant.service lacks '$1' ($2)"; }
need 'StateDirectory=giant' "the database and data directory, writable under ProtectSystem=strict"
need 'ProtectSystem=strict' "the issue's setting"
need 'CapabilityBoundingSet=' "no capabilities"
need 'SystemCallFilter=@system-service' "the issue's setting"
need 'UMask=0077' "files readable by the service user only"
need 'DevicePolicy=closed' "only the devices below"
need 'DeviceAllow=char-nvidia-frontend rw' "/dev/nvidia0..N and /dev/nvidiactl for CUDA"
need 'DeviceAllow=char-nvidia-uvm rw' "/dev/nvidia-uvm for CUDA"
grep -q '^RestrictAddressFamilies=.*AF_INET' "$unit" || fail "RestrictAddressFamilies must keep AF_INET (the API)"
if grep -q '^PrivateDevices=yes' "$unit"; then
    fail "PrivateDevices=yes hides /dev/nvidia*: use DevicePolicy/DeviceAllow (deploy/README.md)"
fi
if grep -q '^MemoryDenyWriteExecute=yes' "$unit"; then
    fail "MemoryDenyWriteExecute=yes breaks oneDNN's JIT kernels"
fi
grep -q '^Environment=GIANT_DB=/var/lib/giant/' "$unit" ||
    fail "GIANT_DB must live in the state directory (the only writable path)"
grep -q '^Environment=GIANT_DATA_DIR=/var/lib/giant/' "$unit" ||
    fail "GIANT_DATA_DIR must live in the state directory (the only writable path)"
[ "$rc" = 0 ] && echo "PASS"
exit $rc
