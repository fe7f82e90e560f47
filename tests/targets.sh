#!/bin/sh
# tests/targets.sh - the tests that exercise the GEMM kernel, the replica
# threads and the API, built for targets other than the machine's own:
# each target selects another register tile (see >>gemm in mirror.h).
#
#   x86-64       the baseline: SSE2 vectors of 4 floats, 6x8 tile
#   x86-64-v3    AVX2 and FMA: 8 floats, 6x16
#   no-fma       the machine's own vectors with multiply and add apart
#   plain-c      no vector extensions (MIRROR_NO_SIMD): the 4x4 C tile
#   clang        clang -O2 for the machine (x86-64 only)
#   arm64        NEON, cross-compiled and run under qemu-user, where
#                aarch64-linux-gnu-gcc and qemu-aarch64 are installed
#
# Prints each binary's result line, then "N passed, N failed".
# The targets build and run side by side, as many at once as the machine
# has cores (each target's tests one after another); their lines come out
# in the order above.
CC=${CC:-cc}
BUILD=${BUILD:-build}/targets
TESTS="test_layers test_replicas test_api"
FLAGS="-O3 -ffp-contract=fast -fno-math-errno -std=c99 -Wall -Wextra -Wpedantic -Werror"
mkdir -p "$BUILD"

# one TARGET: builds and runs every test for one target, printing a line
# for each test and, last, "counts: PASSED FAILED".
one() {
    target=$1
    case $target in
    x86-64 | x86-64-v3) set -- "" "$CC" -march="$target" ;;
    no-fma) set -- "" "$CC" -march=native -mno-fma ;;
    clang) set -- "" clang -march=native -O2 ;;
    native) set -- "" "$CC" ;;
    plain-c) set -- "" "$CC" -DMIRROR_NO_SIMD ;;
    # -O2: Debian's aarch64 gcc 12 stops with an internal error in the
    # vectoriser on test_replicas.c at -O3
    arm64) set -- qemu-aarch64 aarch64-linux-gnu-gcc -static -O2 ;;
    *) echo "targets.sh: no target $target" && echo "counts: 0 1" && return ;;
    esac
    runner=$1 cc=$2
    shift 2
    passed=0 failed=0
    for t in $TESTS; do
        bin=$BUILD/$target-$t
        if ! $cc $FLAGS "$@" "tests/$t.c" -o "$bin" -lm -lpthread >"$bin.build" 2>&1; then
            echo "$target $t: build failed"
            head -n 20 "$bin.build"
            failed=$((failed + 1))
            continue
        fi
        $runner "$bin" >"$bin.out" 2>&1
        rc=$?
        line=$(grep -E '^[a-z_0-9]+: [0-9]+ passed, [0-9]+ failed$' "$bin.out" | tail -n 1)
        if [ -z "$line" ] || [ "$rc" -ne 0 ]; then
            echo "$target $t: exit $rc"
            grep -E 'FAILED' "$bin.out" | head -n 10
            tail -n 3 "$bin.out"
            failed=$((failed + 1))
            [ -z "$line" ] && continue
        fi
        echo "$target $line"
        passed=$((passed + $(echo "$line" | sed -E 's/.*: ([0-9]+) passed.*/\1/')))
        failed=$((failed + $(echo "$line" | sed -E 's/.* ([0-9]+) failed$/\1/')))
    done
    echo "counts: $passed $failed"
}
if [ "${1:-}" = --one ]; then
    one "$2" >"$BUILD/$2.result" 2>&1
    exit 0
fi

case $(uname -m) in
x86_64)
    targets="x86-64"
    if grep -q ' avx2 ' /proc/cpuinfo && grep -q ' fma ' /proc/cpuinfo; then
        targets="$targets x86-64-v3"
    else
        echo "x86-64-v3: skipped, this CPU has no AVX2 and FMA"
    fi
    targets="$targets no-fma"
    if command -v clang >/dev/null; then targets="$targets clang"; fi
    ;;
*)
    targets=native
    ;;
esac
targets="$targets plain-c"
if command -v aarch64-linux-gnu-gcc >/dev/null && command -v qemu-aarch64 >/dev/null; then
    targets="$targets arm64"
else
    echo "arm64: skipped (apt-get install gcc-aarch64-linux-gnu qemu-user)"
fi

# the slowest (arm64 under qemu) first, so that it is not left alone at the end
order=$(printf '%s\n' $targets | awk '$1 == "arm64" { print; next } { rest = rest $1 "\n" } END { printf "%s", rest }')
for target in $targets; do rm -f "$BUILD/$target.result"; done
printf '%s\n' $order | CC="$CC" BUILD="${BUILD%/targets}" xargs -P "$(nproc 2>/dev/null || echo 2)" -I{} sh "$0" --one {}
passed=0
failed=0
for target in $targets; do
    r=$BUILD/$target.result
    if [ ! -f "$r" ] || ! grep -q '^counts: ' "$r"; then
        echo "$target: no result"
        failed=$((failed + 1))
        continue
    fi
    grep -v '^counts: ' "$r"
    set -- $(sed -n 's/^counts: //p' "$r")
    passed=$((passed + $1))
    failed=$((failed + $2))
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
