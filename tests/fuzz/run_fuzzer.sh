#!/bin/sh
# Runs one libFuzzer target for a bounded time on its seed corpus:
#   run_fuzzer.sh BINARY FUZZ_SOURCE_DIR SECONDS [WHY_NOT_BUILT]
# New inputs go to a scratch corpus in the working directory, never into
# the committed seeds; a crash, leak, UB report or hang leaves its input as
# crash-*, leak-*, or timeout-* beside it and fails the test.
# Exit 77 (skipped) when the target was not built, with the reason.
set -u
bin=$1 src=$2 secs=$3 why=${4:-}
name=$(basename "$bin")
if [ ! -x "$bin" ]; then
    echo "$name: skipped: ${why:-the fuzz targets were not built}"
    exit 77
fi
seeds=$src/corpus/${name#fuzz_}
work=corpus-${name#fuzz_}
mkdir -p "$work"
dict=""
[ -f "$src/${name#fuzz_}.dict" ] && dict="-dict=$src/${name#fuzz_}.dict"
# detect_leaks: a leak is a failure; -timeout: one input over 10 s is a hang.
# (Exported on its own line: a comment between a backslash-continued
# assignment and the command ends the command, so the variable never
# reached the fuzzer.)
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
# libFuzzer's own exit code for a crash is 77, which ctest takes for a
# skip (SKIP_RETURN_CODE): a crash, a leak or a timeout must fail the test.
# $dict unquoted on purpose: empty, it must be no argument at all.
# shellcheck disable=SC2086
exec "$bin" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 \
    -error_exitcode=1 -timeout_exitcode=1 \
    -print_final_stats=1 -artifact_prefix="./$name-" $dict "$work" "$seeds"
