#!/bin/sh
# tools/check_cuda12.sh DIR - the README's CUDA 12 build against a CUDA 12
# toolkit in DIR: its nvcc (DIR/bin/nvcc) knows every architecture of the
# README's cuda-12 line, and compiles the README's mirror_cuda.cu with that line
# (-Werror all-warnings); the README's app.c links to it with DIR's
# libraries and runs (on CPU replicas where there is no GPU).
#
# DIR without bin/nvcc (PyPI's CUDA 12 wheels hold ptxas but no nvcc,
# cudafe++ or cicc): the CUDA headers, cuBLAS's and NCCL's from DIR/include
# in place of the toolkit's, compiled by the nvcc on the PATH (its own
# compiler headers, crt/, stay its own) for sm_90 alone, then the link and
# the run with DIR's libraries. DIR/bin/ptxas, where it is, lists the
# architectures. --pip DIR first installs the wheels there (network,
# about 1 GB): nvidia-cuda-runtime-cu12, -cublas-cu12, -nccl-cu12 and
# -cuda-nvcc-cu12, laid out as DIR/include and DIR/lib.
#
# Not part of make test (it needs the network or a second toolkit). Run
# from the repository root; the last line is "cuda12: N passed, N failed".
if [ "$1" = --pip ]; then
    dir=$2
    [ -n "$dir" ] || { echo "usage: tools/check_cuda12.sh [--pip] DIR"; exit 2; }
    python3 -m pip install -q --no-deps --target "$dir/wheels" nvidia-cuda-runtime-cu12 nvidia-cublas-cu12 \
        nvidia-nccl-cu12 nvidia-cuda-nvcc-cu12 || exit 1
    mkdir -p "$dir/include" "$dir/lib" "$dir/bin" || exit 1
    for p in cuda_runtime cublas nccl; do
        cp -R "$dir/wheels/nvidia/$p/include/." "$dir/include/" && cp -P "$dir/wheels/nvidia/$p/lib/"* "$dir/lib/" || exit 1
    done
    cp "$dir/wheels/nvidia/cuda_nvcc/bin/ptxas" "$dir/bin/" || exit 1
    for f in "$dir/lib/"*.so.*; do ln -sf "$(basename "$f")" "${f%%.so.*}.so"; done
else
    dir=$1
fi
[ -n "$dir" ] && [ -f "$dir/include/cuda_runtime_api.h" ] ||
    { echo "usage: tools/check_cuda12.sh [--pip] DIR (DIR/include/cuda_runtime_api.h of CUDA 12)"; exit 2; }
CC=${CC:-cc}
passed=0
failed=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

check() {
    name=$1
    shift
    if "$@" >"$tmp/check.out" 2>&1; then
        passed=$((passed + 1))
        echo "ok: $name"
    else
        failed=$((failed + 1))
        echo "FAILED: $name"
        sed 's/^/    /' "$tmp/check.out" | tail -n 30
    fi
}

# The README's blocks (its source marks them <!-- run.sh: NAME -->).
readme_block() {
    awk -v n="<!-- run.sh: $1 -->" '$0 == n { f = 1; next } f && /^```/ { if (p) exit; p = 1; next } p' README.md
}
readme_block cuda-12 | tr -d '\\\n' | sed 's/^nvcc //; s/ -c mirror_cuda\.cu -o mirror_cuda\.o.*//' >"$tmp/flags"
awk '/^<!-- run.sh: cuda-app -->$/ { f = 1; next } f && /^```c$/ { p = 1; next } p && /^```$/ { exit } p' README.md >"$tmp/app.c"
# mirror_cuda.cu as the README prints it, beside the two headers
awk '/^Exactly one `.cu` file/ { f = 1 } f && /^```c$/ { p = 1; next } p && /^```$/ { exit } p' README.md >"$tmp/mirror_cuda.cu"
cp mirror.h mirror_cuda.h "$tmp/"
version=$(sed -n 's/^#define CUDART_VERSION *\([0-9]*\).*/\1/p' "$dir/include/cuda_runtime_api.h")
echo "cuda12: $dir: CUDA runtime headers $version"
check "the headers are CUDA 12's (CUDART_VERSION 12000 to 12999: $version)" test "${version:-0}" -ge 12000 -a "${version:-0}" -lt 13000
lib=$dir/lib64
[ -d "$lib" ] || lib=$dir/lib

# Every architecture of the README's CUDA 12 line, in the toolkit's list
# (nvcc --list-gpu-code), or in ptxas's where there is no nvcc.
archs=$(tr ' ,' '\n\n' <"$tmp/flags" | sed -n 's/^\(arch\|code\)=\(sm\|compute\)_\([0-9]*\)$/\3/p' | sort -u)
knows() {
    if [ -x "$dir/bin/nvcc" ]; then
        "$dir/bin/nvcc" --list-gpu-code | sed 's/^sm_//' >"$tmp/list" || return 1
    else
        "$dir/bin/ptxas" --help | grep -o "'compute_[0-9]*'" | tr -d "'" | sed 's/^compute_//' >"$tmp/list"
    fi
    for a in $archs; do grep -qx "$a" "$tmp/list" || { echo "not known: $a"; return 1; }; done
    echo "known: $archs"
}
if [ -x "$dir/bin/nvcc" ] || [ -x "$dir/bin/ptxas" ]; then
    check "the README's CUDA 12 line: each architecture ($(echo "$archs" | tr '\n' ' ')) known to CUDA $version" knows
fi

if [ -x "$dir/bin/nvcc" ]; then
    nvcc=$dir/bin/nvcc
    flags=$(cat "$tmp/flags")
    what="$dir/bin/nvcc with the README's CUDA 12 line"
else
    nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
    flags="-O3 -gencode arch=compute_90,code=sm_90 -I$dir/include -DMIRROR_ZLIB"
    what="$nvcc (sm_90) with $dir's CUDA, cuBLAS and NCCL headers"
fi
compiles() {
    # shellcheck disable=SC2086
    (cd "$tmp" && "$nvcc" $flags -Werror all-warnings -c mirror_cuda.cu -o mirror_cuda.o) &&
        if [ ! -x "$dir/bin/nvcc" ]; then
            # shellcheck disable=SC2086
            (cd "$tmp" && "$nvcc" $flags -M mirror_cuda.cu) | tr ' \\' '\n\n' | grep -q "^$dir/include/cuda_runtime_api.h$"
        fi
}
check "mirror_cuda.cu compiles: $what (-Werror all-warnings)" compiles
links() {
    [ -f "$tmp/mirror_cuda.o" ] || return 1
    (cd "$tmp" && $CC -O1 -std=c99 app.c mirror_cuda.o -o app -L"$lib" -Wl,-rpath,"$lib" \
        -lcudart_static -lcublasLt -lcublas -lnccl -lstdc++ -lz -lm -ldl -lrt -lpthread) &&
        (cd "$tmp" && ./app) && ldd "$tmp/app" | grep 'libcublas\.so\.12'
}
check "the README's app.c links to it with $lib's libraries (cuBLAS 12) and runs" links
echo "cuda12: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
