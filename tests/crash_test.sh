#!/bin/sh
# tests/crash_test.sh - SIGKILL the trainer at random moments while it writes
# a checkpoint after every step, 20 times; after every kill the last
# checkpoint must load and training must resume from it. Run by .ci/run (and
# make test-crash); ends with "N passed, N failed".
BUILD=${BUILD:-build}
KILLS=${KILLS:-20}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
ck="$dir/run.ckpt"
args="--model mlp --synthetic 3000 --batch 32 --replicas 2 --seed 5"
passed=0
failed=0
i=0
tries=0
while [ "$i" -lt "$KILLS" ] && [ "$tries" -lt $((KILLS * 3)) ]; do
    tries=$((tries + 1))
    resume=""
    [ -f "$ck" ] && resume="--resume $ck"
    "$BUILD/train" $args --epochs 1000 --save "$ck" --checkpoint-every 1 $resume >"$dir/run.out" 2>&1 &
    pid=$!
    # a random moment between 0.15 and 0.65 s
    sleep "$(awk -v s="$tries$$" 'BEGIN { srand(s); printf "%.3f", 0.15 + rand() * 0.5 }')"
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    [ -f "$ck" ] || continue # killed before its first checkpoint
    i=$((i + 1))
    # The checkpoint left by the kill loads (its epoch comes back), and the
    # rest of that epoch trains from it.
    epoch=$("$BUILD/train" $args --resume "$ck" --epochs 1 2>"$dir/check.err" |
        sed -n 's/^resume: .*, epoch \([0-9]*\) step.*/\1/p')
    if [ -n "$epoch" ] && "$BUILD/train" $args --resume "$ck" --epochs "$epoch" >"$dir/resume.out" 2>&1 &&
        grep -q '^final:' "$dir/resume.out"; then
        passed=$((passed + 1))
        echo "kill $i: the last checkpoint (epoch $epoch) loads and training resumes"
    else
        failed=$((failed + 1))
        echo "kill $i: FAILED"
        cat "$dir/run.out" "$dir/check.err" "$dir/resume.out" 2>/dev/null | tail -n 5
    fi
done
[ "$i" -ge "$KILLS" ] || { echo "only $i kills found a checkpoint"; failed=$((failed + 1)); }
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -ge 1 ]
