#!/bin/sh
# tests/fuzz/run.sh TARGET... - make fuzz: for each libFuzzer target, replay
# its seed corpus, then fuzz it for FUZZ_SECONDS from a scratch copy of the
# corpus (the repository's corpus is not changed). A crash, a leak or a
# sanitizer report fails the target; its input is kept in $BUILD/fuzz.
BUILD=${BUILD:-build}
FUZZ_SECONDS=${FUZZ_SECONDS:-20}
passed=0
failed=0
for t in "$@"; do
    bin="$BUILD/fuzz/fuzz_$t"
    corpus="tests/fuzz/corpus/$t"
    if "$bin" -runs=0 "$corpus" >"$BUILD/fuzz/$t.replay.log" 2>&1; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "fuzz_$t: FAILED replaying its corpus"
        tail -n 20 "$BUILD/fuzz/$t.replay.log"
    fi
    scratch="$BUILD/fuzz/$t.corpus"
    rm -rf "$scratch"
    mkdir -p "$scratch"
    if "$bin" -max_total_time="$FUZZ_SECONDS" -print_final_stats=1 -artifact_prefix="$BUILD/fuzz/$t-" \
        "$scratch" "$corpus" >"$BUILD/fuzz/$t.log" 2>&1; then
        passed=$((passed + 1))
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$BUILD/fuzz/$t.log")
        echo "fuzz_$t: $runs executions in ${FUZZ_SECONDS}s, no finding"
    else
        failed=$((failed + 1))
        echo "fuzz_$t: FINDING"
        grep -E 'ERROR|SUMMARY|Test unit written' "$BUILD/fuzz/$t.log" | head -n 10
    fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
