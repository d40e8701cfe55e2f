#!/usr/bin/env bash
# tests/run_tests.sh JOBS TEST...: `make test`'s runner. Runs the test
# binaries JOBS at a time (most of them are single-threaded CLI runs, so two
# at a time on two cores takes about half as long), each one's output kept
# and printed whole when it ends, so the log reads as if they ran one by one.
# Every test runs even after a failure; the failed ones are listed at the end
# and the exit status is 1. The tests share nothing: each works in a folder
# or file of its own (mkdtemp, or a name with its pid).
set -uo pipefail
jobs=$1
shift
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
run_one() {
    local t=$1 work=$2 log
    log=$(mktemp "$work/log.XXXXXX")
    local start=$SECONDS
    if "$t" >"$log" 2>&1; then status=ok; else status=FAILED; echo "$t" >>"$work/failed"; fi
    # one test's output at a time
    flock "$work/lock" sh -c 'echo "== $1"; cat "$2"; echo "== $1: $3 in $4 s"' _ "$t" "$log" "$status" \
        "$((SECONDS - start))"
    rm -f "$log"
}
export -f run_one
printf '%s\n' "$@" | xargs -P "$jobs" -I{} bash -c 'run_one "$1" "$2"' _ {} "$work"
if [ -s "$work/failed" ]; then
    echo "FAILED: $(sort "$work/failed" | tr '\n' ' ')"
    exit 1
fi
echo "all $# tests passed"
