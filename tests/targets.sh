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
CC=${CC:-cc}
BUILD=${BUILD:-build}/targets
TESTS="test_layers test_replicas test_api"
FLAGS="-O3 -ffp-contract=fast -fno-math-errno -std=c99 -Wall -Wextra -Wpedantic -Werror"
passed=0
failed=0
mkdir -p "$BUILD"

# run TARGET RUNNER COMPILER FLAGS...: builds and runs every test for one target.
run() {
    target=$1 runner=$2 cc=$3
    shift 3
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
}

case $(uname -m) in
x86_64)
    run x86-64 "" "$CC" -march=x86-64
    if grep -q ' avx2 ' /proc/cpuinfo && grep -q ' fma ' /proc/cpuinfo; then
        run x86-64-v3 "" "$CC" -march=x86-64-v3
    else
        echo "x86-64-v3: skipped, this CPU has no AVX2 and FMA"
    fi
    run no-fma "" "$CC" -march=native -mno-fma
    if command -v clang >/dev/null; then run clang "" clang -march=native -O2; fi
    ;;
*)
    run native "" "$CC"
    ;;
esac
run plain-c "" "$CC" -DMIRROR_NO_SIMD

if command -v aarch64-linux-gnu-gcc >/dev/null && command -v qemu-aarch64 >/dev/null; then
    # -O2: Debian's aarch64 gcc 12 stops with an internal error in the
    # vectoriser on test_replicas.c at -O3
    run arm64 qemu-aarch64 aarch64-linux-gnu-gcc -static -O2
else
    echo "arm64: skipped (apt-get install gcc-aarch64-linux-gnu qemu-user)"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
