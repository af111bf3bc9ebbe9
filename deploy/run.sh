#!/bin/sh
# Installs what is missing, builds the giant program (Release; the tests are
# deploy/test.sh's) and starts the service with its embedded defaults: SQLite
# file giant.db and data directory giant-data/ in the current directory, CPU
# when there is no GPU, listening on 127.0.0.1:8080.
# Extra arguments go to `giant serve` (try --help).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/deploy/install-deps.sh"
build="${GIANT_BUILD_DIR:-$root/build}"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j"$(nproc)" --target giant
exec "$build/giant" serve "$@"
