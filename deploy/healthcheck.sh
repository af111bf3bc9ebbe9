#!/bin/bash
# The container image's HEALTHCHECK: GET /healthz on the admin listener
# (GIANT_ADMIN_LISTEN) when there is one, since it answers when clients fill
# the API's port, else on the port GIANT_LISTEN names; with bash's /dev/tcp,
# so the image needs no curl. Exit 0 when the service answers 200, 1
# otherwise or after GIANT_HEALTHCHECK_TIMEOUT seconds (default 3). A
# wildcard host (0.0.0.0, [::], none) is asked on loopback.
set -u
if [ -z "${GIANT_HEALTHCHECK_INNER:-}" ]; then
    if GIANT_HEALTHCHECK_INNER=1 timeout "${GIANT_HEALTHCHECK_TIMEOUT:-3}" "$0"; then
        exit 0
    fi
    echo "healthcheck: GET /healthz on ${GIANT_ADMIN_LISTEN:-${GIANT_LISTEN:-127.0.0.1:8080}} did not answer 200" >&2
    exit 1
fi

listen=${GIANT_ADMIN_LISTEN:-${GIANT_LISTEN:-127.0.0.1:8080}}
port=${listen##*:}
host=${listen%:*}
case $host in
    ""|0.0.0.0|"[::]"|"*") host=127.0.0.1 ;;
    \[*\]) host=${host#[}; host=${host%]} ;;
esac
case $port in
    ""|*[!0-9]*) exit 1 ;;
esac
exec 3<>"/dev/tcp/$host/$port" || exit 1
printf 'GET /healthz HTTP/1.0\r\nHost: %s\r\nConnection: close\r\n\r\n' "$host" >&3
IFS=' ' read -r _ status _ <&3 || exit 1
[ "$status" = 200 ]
