#!/bin/sh
# tests/install.sh - make install into a temporary prefix: the headers and
# pkg-config's mirror.pc and mirror-cuda.pc where they belong, with mirror.h's
# MIRROR_VERSION; examples/hello.c built outside the repository with
# pkg-config's flags alone, warning-free, and run; mirror-cuda's flags name
# CUDA_PATH, and where nvcc is, the CUDA build of the library compiles with
# them and hello.c links against it and runs; DESTDIR and INCLUDEDIR; make
# uninstall removes what install put there and nothing else; paths with a
# space, & or | installed and uninstalled exactly, a ' or # refused; a
# file install did not write left by uninstall.
#
# Run from the repository root by tests/run.sh (the plain make test only)
# and make test-install; the last line is "install: N passed, N failed".
# The temporary directory goes when it ends, also on failure.
CUDA_PATH=${CUDA_PATH:-/usr/local/cuda}
export CUDA_PATH
NVCC=${NVCC:-$CUDA_PATH/bin/nvcc}
[ "${NO_CUDA:-}" = 1 ] && NVCC=
CC=${CC:-cc}
MAKE=${MAKE:-make}
# The make that runs this test is not this one's parent: its flags and
# jobserver stay with it.
unset MAKEFLAGS MFLAGS MAKELEVEL
passed=0
failed=0
repo=$(pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM HUP

# One check: a name and a command; passes when the command exits 0. Its
# output is shown when it fails.
check() {
    name=$1
    shift
    if "$@" >"$tmp/check.out" 2>&1; then
        passed=$((passed + 1))
        echo "ok: $name"
    else
        failed=$((failed + 1))
        echo "FAILED: $name"
        sed 's/^/    /' "$tmp/check.out"
    fi
}

# No file (or link) left under a directory, apart from those named.
no_files_but() {
    dir=$1
    shift
    left=$(find "$dir" ! -type d | sort)
    want=$(for f in "$@"; do echo "$f"; done | sort)
    [ "$left" = "$want" ] || { echo "left under $dir:"; echo "$left"; return 1; }
}

# Compiles quietly: exit 0 and no warning on stderr.
no_warning() {
    "$@" 2>"$tmp/cc.err" || { cat "$tmp/cc.err"; return 1; }
    ! grep -i 'warning' "$tmp/cc.err"
}

version=$(sed -n 's/^#define MIRROR_VERSION "\([^"]*\)"$/\1/p' mirror.h)
newest=$(sed -n '/^   REVISION HISTORY/,/^\*\//p' mirror.h | sed -nE 's/^      ([0-9]+\.[0-9]+)  .*/\1/p' | head -n 1)
check "mirror.h's MIRROR_VERSION ($version) is the REVISION HISTORY's newest entry ($newest)" \
    test -n "$version" -a "$version" = "$newest"

prefix=$tmp/prefix
inc=$prefix/include
pc=$prefix/share/pkgconfig
check "make install PREFIX=<tmp>" "$MAKE" install PREFIX="$prefix"
installed() {
    cmp mirror.h "$inc/mirror.h" && cmp mirror_cuda.h "$inc/mirror_cuda.h" &&
        test -f "$pc/mirror.pc" && test -f "$pc/mirror-cuda.pc" &&
        no_files_but "$prefix" "$inc/mirror.h" "$inc/mirror_cuda.h" "$pc/mirror.pc" "$pc/mirror-cuda.pc"
}
check "make install: the two headers in PREFIX/include, mirror.pc and mirror-cuda.pc in PREFIX/share/pkgconfig, nothing else" \
    installed
check "mirror.pc: prefix and version written in, no @VARIABLE@ left" sh -c \
    "grep -qx 'prefix=$prefix' '$pc/mirror.pc' && grep -qx 'Version: $version' '$pc/mirror.pc' && ! grep -q '@' '$pc/mirror.pc' '$pc/mirror-cuda.pc'"

if command -v pkg-config >/dev/null; then
    # Only the temporary prefix: an installed mirror elsewhere is not found.
    PKG_CONFIG_PATH=$pc
    PKG_CONFIG_LIBDIR=$pc
    export PKG_CONFIG_PATH PKG_CONFIG_LIBDIR
    check "pkg-config --modversion mirror: $version" test "$(pkg-config --modversion mirror)" = "$version"
    check "pkg-config --cflags --libs mirror: -I<prefix>/include -lm -lpthread" sh -c \
        "pkg-config --cflags --libs mirror | tee /dev/stderr | grep -qE '^-I$inc +-lm +-lpthread *\$'"

    # hello.c as a program of one's own: outside the repository, mirror.h
    # included as an installed header, pkg-config's flags and nothing else.
    mkdir "$tmp/app"
    check "examples/hello.c includes \"../mirror.h\" (this test makes it <mirror.h>)" \
        grep -qx '#include "../mirror.h"' examples/hello.c
    sed 's|^#include "../mirror.h"$|#include <mirror.h>|' examples/hello.c >"$tmp/app/hello.c"
    flags=$(pkg-config --cflags --libs mirror)
    cd "$tmp/app" || exit 1
    check "hello.c: mirror.h found in the prefix" sh -c "$CC -M hello.c $flags | grep -q '$inc/mirror.h'"
    check "cc hello.c \$(pkg-config --cflags --libs mirror), outside the repository: no warning" \
        no_warning "$CC" hello.c -o hello $flags
    check "the hello built so runs to its test accuracy on 2 replicas" sh -c \
        "./hello | tee /dev/stderr | grep -q '^test accuracy [0-9.]* on 2 replicas\$'"

    cuda_flags() {
        got=" $(pkg-config --cflags --libs mirror-cuda) " || return 1
        echo "$got"
        for f in "-I$inc" "-I$CUDA_PATH/include" "-L$CUDA_PATH/lib64" "-Wl,-rpath,$CUDA_PATH/lib64" \
            -lcudart_static -lcublasLt -lcublas -lm -lpthread; do
            case $got in *" $f "*) ;; *) echo "not there: $f"; return 1 ;; esac
        done
    }
    check "pkg-config --cflags --libs mirror-cuda: the prefix, CUDA_PATH's include and lib64, the CUDA libraries" cuda_flags
    if [ -n "$NVCC" ] && [ -x "$NVCC" ]; then
        # The one .cu file of a CUDA program, and hello.c, without its
        # MIRROR_IMPLEMENTATION, linked to it (its cpu:2 replicas need no GPU).
        printf '#define MIRROR_IMPLEMENTATION\n#include <mirror_cuda.h>\n' >mirror_cuda.cu
        sed '/^#define MIRROR_IMPLEMENTATION$/d' hello.c >app.c
        cuda_cflags=$(pkg-config --cflags mirror-cuda)
        check "nvcc -c mirror_cuda.cu \$(pkg-config --cflags mirror-cuda): no warning" \
            no_warning "$NVCC" -c mirror_cuda.cu -o mirror_cuda.o $cuda_cflags
        check "cc app.c mirror_cuda.o \$(pkg-config --cflags --libs mirror-cuda) links, and runs on CPU replicas" sh -c \
            "$CC app.c mirror_cuda.o -o app $(pkg-config --cflags --libs mirror-cuda) && ./app | grep -q '^test accuracy [0-9.]* on 2 replicas\$'"
    else
        echo "install: skipped: the CUDA build with mirror-cuda's flags (no nvcc${NVCC:+ at $NVCC})"
    fi
    cd "$repo" || exit 1
else
    echo "install: skipped: the pkg-config checks (no pkg-config; apt-get install pkg-config)"
fi

check "make uninstall PREFIX=<tmp>: no file left in the prefix" sh -c \
    "'$MAKE' uninstall PREFIX='$prefix' && find '$prefix' ! -type d | { ! grep .; }"

# A staged install (DESTDIR) with its own INCLUDEDIR: the files under the
# stage, the prefix without it in the .pc files; uninstall leaves a file
# that is not its own.
stage=$tmp/stage
staged() {
    "$MAKE" install DESTDIR="$stage" PREFIX=/opt/mirror INCLUDEDIR=/opt/mirror/include/ml || return 1
    grep -qx 'prefix=/opt/mirror' "$stage/opt/mirror/share/pkgconfig/mirror.pc" &&
        grep -qx 'includedir=${prefix}/include/ml' "$stage/opt/mirror/share/pkgconfig/mirror-cuda.pc" &&
        no_files_but "$stage" "$stage/opt/mirror/include/ml/mirror.h" "$stage/opt/mirror/include/ml/mirror_cuda.h" \
            "$stage/opt/mirror/share/pkgconfig/mirror.pc" "$stage/opt/mirror/share/pkgconfig/mirror-cuda.pc"
}
check "make install DESTDIR=<tmp> PREFIX=/opt/mirror INCLUDEDIR=/opt/mirror/include/ml" staged
unstaged() {
    : >"$stage/opt/mirror/include/ml/other.h"
    "$MAKE" uninstall DESTDIR="$stage" PREFIX=/opt/mirror INCLUDEDIR=/opt/mirror/include/ml &&
        no_files_but "$stage" "$stage/opt/mirror/include/ml/other.h"
}
check "make uninstall DESTDIR=<tmp> ...: only its own files go (another header in the directory stays)" unstaged

# Paths with a space, & or |: installed whole, written into both .pc files
# with the space escaped as pkg-config reads it, and uninstalled exactly; a
# file named as the path's first word (what a split path would remove)
# stays. A ' or # is refused by install and uninstall alike, touching
# nothing.
odd=$tmp/odd
odd_path() {
    rm -rf "$odd" && mkdir "$odd" && : >"$odd/my" && : >"$odd/R" || return 1
    root=$1
    shift
    "$MAKE" install "$@" || return 1
    want=$(printf '%s' "$prefix" | sed 's/ /\\ /g')
    for f in mirror.pc mirror-cuda.pc; do
        grep -qxF "prefix=$want" "$root$prefix/share/pkgconfig/$f" || { echo "$f:"; cat "$root$prefix/share/pkgconfig/$f"; return 1; }
    done
    no_files_but "$odd" "$odd/my" "$odd/R" "$root$prefix/include/mirror.h" "$root$prefix/include/mirror_cuda.h" \
        "$root$prefix/share/pkgconfig/mirror.pc" "$root$prefix/share/pkgconfig/mirror-cuda.pc" || return 1
    "$MAKE" uninstall "$@" && no_files_but "$odd" "$odd/my" "$odd/R"
}
# Another package's mirror.h where uninstall looks: left, named, a failure;
# the files install wrote beside it go.
others() {
    rm -rf "$odd" && mkdir -p "$odd/include" && echo 'int other;' >"$odd/include/mirror.h" || return 1
    "$MAKE" install PREFIX="$odd" INCLUDEDIR="$odd/inc" || return 1
    ! "$MAKE" uninstall PREFIX="$odd" >"$tmp/others.out" 2>&1 && cat "$tmp/others.out" &&
        grep -q "make uninstall: $odd/include/mirror.h is not the file make install writes" "$tmp/others.out" &&
        no_files_but "$odd" "$odd/include/mirror.h" "$odd/inc/mirror.h" "$odd/inc/mirror_cuda.h" &&
        "$MAKE" uninstall PREFIX="$odd" INCLUDEDIR="$odd/inc" && no_files_but "$odd" "$odd/include/mirror.h"
}
check "make uninstall leaves a mirror.h that is not mirror's, says so and fails; removes what install wrote" others
for prefix in "$odd/my prefix" "$odd/R&D" "$odd/R|D"; do
    check "make install, uninstall PREFIX='$prefix'" odd_path "" PREFIX="$prefix"
done
prefix=/opt/mirror
check "make install, uninstall DESTDIR='$odd/my stage'" odd_path "$odd/my stage" DESTDIR="$odd/my stage" PREFIX="$prefix"
# refused for what the path holds (the message), before anything is made,
# directories too
refused_path() {
    rm -rf "$odd" && mkdir "$odd" && : >"$odd/my" || return 1
    ! "$MAKE" install "$@" >"$tmp/refused.out" 2>&1 && grep -q 'cannot hold; nothing done' "$tmp/refused.out" &&
        ! "$MAKE" uninstall "$@" >"$tmp/refused.out" 2>&1 && grep -q 'cannot hold; nothing done' "$tmp/refused.out" &&
        test "$(find "$odd" -mindepth 1)" = "$odd/my" && return 0
    cat "$tmp/refused.out"
    return 1
}
check "make install and uninstall refuse PREFIX='$odd/it's'" refused_path PREFIX="$odd/it's"
check "make install and uninstall refuse DESTDIR='$odd/a#b'" refused_path DESTDIR="$odd/a#b"
check "make install and uninstall refuse PREFIX='$odd/a\"b'" refused_path PREFIX="$odd/a\"b"

echo "install: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
