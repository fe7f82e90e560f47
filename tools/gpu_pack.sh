#!/bin/sh
# tools/gpu_pack.sh OBJ PACK - the last step of make gpu-pack: the programs
# of both flavours (OBJ/nccl, OBJ/nonccl) into PACK and PACK/nonccl,
# stripped, beside the run script, the benchmarks' scripts and PACK.txt (the
# commit, the code in it, and what the pack needs where it runs: the
# driver its CUDA runtime asks for, glibc, the shared libraries); then the
# checks below.
# tools/gpu_pack.sh --check PACK - the checks alone (make test-pack): every
# program present, none with an AVX-512 instruction (a zmm register: the
# GPU machine's CPU is unknown), none that needs libcudart.so (the runtime
# is linked in), none in nonccl/ that needs libnccl, at most 48 MiB in all.
set -u
PROGRAMS="test_cuda train_cuda bench_gpu bench_fused_cuda gpu_info"
LIMIT_MIB=48

check() {
    pack=$1
    bad=0 count=0 zmm=0 cudart=0 nccl=0
    tmp=$(mktemp) || return 1
    for p in $PROGRAMS; do
        for f in "$pack/$p" "$pack/nonccl/$p"; do
            if [ ! -x "$f" ]; then
                echo "gpu-pack: $f missing"
                bad=1
                continue
            fi
            # objdump's own failure must not read as "no zmm found"
            if ! objdump -d --no-show-raw-insn "$f" >"$tmp" 2>&1; then
                echo "gpu-pack: objdump -d $f failed: $(tail -n 1 "$tmp")"
                bad=1
                continue
            fi
            count=$((count + 1))
            n=$(grep -c 'zmm' "$tmp")
            [ "$n" -eq 0 ] || { echo "gpu-pack: $f: $n instructions on zmm registers (AVX-512)"; zmm=$((zmm + 1)); }
            objdump -p "$f" | awk '$1 == "NEEDED" { print $2 }' >"$tmp"
            ! grep -q '^libcudart' "$tmp" || { echo "gpu-pack: $f needs a shared CUDA runtime"; cudart=$((cudart + 1)); }
            case $f in */nonccl/*) ! grep -q '^libnccl' "$tmp" || { echo "gpu-pack: $f needs libnccl"; nccl=$((nccl + 1)); } ;; esac
        done
    done
    rm -f "$tmp"
    [ -x "$pack/run.sh" ] || { echo "gpu-pack: $pack/run.sh missing"; bad=1; }
    echo "gpu-pack: $count of 10 programs read: $zmm with zmm registers (AVX-512)"
    echo "gpu-pack: $cudart with a shared CUDA runtime, $nccl in nonccl/ with libnccl"
    bytes=$(find "$pack" -type f -exec cat {} + | wc -c)
    mib=$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }')
    if [ "$bytes" -le $((LIMIT_MIB * 1048576)) ]; then
        echo "gpu-pack: $mib MiB in all: within $LIMIT_MIB"
    else
        echo "gpu-pack: $mib MiB in all: over $LIMIT_MIB"
        bad=1
    fi
    [ $count -eq 10 ] && [ $zmm -eq 0 ] && [ $cudart -eq 0 ] && [ $nccl -eq 0 ] && [ $bad -eq 0 ]
}

if [ "${1:-}" = --check ]; then
    [ $# -eq 2 ] || { echo "usage: tools/gpu_pack.sh --check PACK" >&2; exit 2; }
    check "$2"
    exit
fi
[ $# -eq 2 ] || { echo "usage: tools/gpu_pack.sh OBJ PACK" >&2; exit 2; }
obj=$1
pack=$2
rm -rf "$pack"
mkdir -p "$pack/nonccl" "$pack/bench" || exit 1
for p in $PROGRAMS; do
    strip -o "$pack/$p" "$obj/nccl/$p" && strip -o "$pack/nonccl/$p" "$obj/nonccl/$p" || exit 1
    chmod 755 "$pack/$p" "$pack/nonccl/$p"
done
cp tests/gpu/pack_run.sh "$pack/run.sh" && chmod 755 "$pack/run.sh" || exit 1
cp bench/bench_torch.py bench/bench_torch_amp.py bench/profile_torch.py bench/gpu_table.sh "$pack/bench/" || exit 1

# What the programs need at start: the newest glibc symbol version, and the
# shared libraries (the run script looks for cuBLAS and NCCL).
glibc=$(for f in "$pack"/* "$pack"/nonccl/*; do [ -x "$f" ] && objdump -T "$f" 2>/dev/null; done |
    grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -t. -k1,1n -k2,2n -k3,3n | tail -n 1)
needed=$(objdump -p "$pack/train_cuda" "$pack/test_cuda" 2>/dev/null | awk '$1 == "NEEDED" { print $2 }' | sort -u | tr '\n' ' ')
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || commit="$commit (with uncommitted changes)"
nvcc=$(${NVCC:-${CUDA_PATH:-/usr/local/cuda}/bin/nvcc} --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')
# the GPU code (the sub-make's list of code= words): SASS, and PTX that the
# driver compiles for a GPU newer than every SASS
codes=$(cat "$obj/nccl/codes.txt" 2>/dev/null)
sass=$(echo "$codes" | tr ' ' '\n' | sed -n 's/^sm_//p' | tr '\n' ' ')
ptx=$(echo "$codes" | tr ' ' '\n' | sed -n 's/^compute_//p' | tr '\n' ' ')
device="device SASS for ${sass:-none }+ PTX for ${ptx:-none }(gpu_info prints the one a GPU takes)"
[ -n "$codes" ] || device="device code unknown (built with -arch=... flags)"
# the driver that the CUDA runtime linked in asks for (CUDA's minor version
# compatibility: any driver of the runtime's major)
major=${nvcc%%.*}
case $major in 11) branch=450 ;; 12) branch=525 ;; 13) branch=580 ;; *) branch= ;; esac
prev=$((${major:-13} - 1))
{
    echo "commit: $commit"
    echo "built: $(date -u '+%Y-%m-%d %H:%M UTC') on $(uname -n), nvcc ${nvcc:-unknown}, $(${CC:-cc} --version | head -n 1)"
    echo "code: host x86-64-v3 (no AVX-512); $device; CUDA and C++ runtimes linked in; no MPI"
    echo "driver: ${branch:-a driver for CUDA $major.0} or newer (the CUDA ${nvcc:-unknown} runtime is linked in); with an older one, gpu_info and run.sh say \"the driver (CUDA $prev.x) is older than this pack's CUDA ${nvcc:-unknown} runtime: driver ${branch:-for CUDA $major.0} or newer, or a pack built with CUDA $prev\" (make gpu-pack CUDA_PATH=a CUDA $prev toolkit)"
    echo "needs: glibc ${glibc:-unknown} or newer; $needed(nonccl/: no libnccl)"
    echo "host memory: run.sh sets MIRROR_HOST_MEMORY=advisory unless the caller set it: physical memory is advice to mirror's check, never a refusal (GPU microVMs start with a MemTotal far below what they can give)"
} >"$pack/PACK.txt"
echo "gpu-pack: $pack, commit $commit"
check "$pack"
