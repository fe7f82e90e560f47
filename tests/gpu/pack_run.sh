#!/bin/sh
# pack_run.sh [--cpu] OUTDIR [SECONDS] - the GPU checks in one command under
# one deadline (SECONDS, default 480): build/gpu-pack/run.sh (make gpu-pack
# copies it there) and make test-gpu. GPU machines come rarely and briefly,
# so the stages run in order of value, each program bounded by the time
# left, and every line of OUTDIR/gpu-results.txt is written when its step
# ends: a run cut short keeps everything before the cut. Each program's
# whole output stays in OUTDIR.
#
#   header     date, commit, GPU, driver, CUDA runtime, cuBLAS, NCCL, the
#              GPU code built in and the one each GPU takes, and the
#              flavour that runs (nonccl/ where libnccl is not found)
#   smoke      the trainer in fp32, fp16 and bf16 on 1 and 2 replicas of
#              the GPU (about 20 s)
#   test_cuda  the GPU tests, each of their checks counted
#   trainer    1 and 4 replicas of the GPU in fp32, fp16 and bf16: plain,
#              --graphs, --shard-update on, --deterministic; the equalities
#              the manual promises, checkpoints compared byte for byte
#   bench      bench_gpu, bench_torch.py (eager, graphs), bench_fused_cuda,
#              bench_torch_amp.py, and bench/gpu_table.sh's comparison
#   sanitizer  compute-sanitizer memcheck, then racecheck, over "test_cuda
#              ops" (the operation tests)
#   profile    where the CNN's step at batch 512 spends its time: the
#              trainer's phases, its kernels under ncu, PyTorch's under
#              torch.profiler (bench/profile_torch.py)
#   mpi        the CUDA + MPI trainer, where it is built and mpirun is
#              (make test-gpu; the pack has no MPI)
#   compile    bench_torch.py's torch.compile (minutes), then the table again
#
# Result lines: "ok:", "FAILED:", "skipped:", "cut:" (stopped by the
# deadline) and "peer:" (a peer's failure, not mirror's: PyTorch's programs,
# torch.compile, or compute-sanitizer where it cannot run on the machine);
# the last line is "== end: P passed, F failed, S skipped, C cut, E peer".
# Exit 0 when none of mirror's checks failed (a peer's failure does not
# count), 1 when one did, or after the header where the pack cannot run:
# no NVIDIA driver, no GPU, a driver older than the pack's CUDA runtime
# (each said so: "no driver:", "no GPU:", "driver too old:"), or a GPU
# with no code in the pack ("no code:"); 2 on bad arguments.
#
# Host memory: MIRROR_HOST_MEMORY=advisory unless the caller set it (the
# results header says which): GPU machines that are microVMs start with a
# MemTotal far below the memory they can give, so physical memory is only
# advice to mirror's check, never a refusal.
#
# --cpu: every stage's logic on CPU replicas (cpu:1, cpu:4 for cuda:0 and
# cuda:0,0,0,0; the GPU-only programs skipped), the check make test-pack
# runs. It runs mirror's programs alone: the peers' benchmarks (PyTorch's
# eager, graphs and torch.compile) are skipped, so that no state of a
# PyTorch install can fail it; they run on a GPU, and make bench-peers runs
# them on the CPU.
#
# PyTorch's Inductor (torch.compile) keeps its compiled kernels in a cache
# that every process of a user shares (/tmp/torchinductor_$USER), where one
# that another process left broken (a zero-byte .so: "file too short")
# fails the compile. A GPU run gives PyTorch a cache of its own
# (TORCHINDUCTOR_CACHE_DIR, a temporary directory removed at the end)
# unless the caller set one; the results header says which.
# GPU_BIN (the programs) and GPU_SCRIPTS (the benchmarks' scripts) default
# to the pack's layout; GPU_SKIP lists stages to leave out; GPU_FLAVOUR=nonccl
# takes the no-NCCL flavour whatever is found.
set -u
mode=gpu
if [ "${1:-}" = --cpu ]; then
    mode=cpu
    shift
fi
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: run.sh [--cpu] OUTDIR [SECONDS]" >&2
    exit 2
fi
total=${2:-480}
case $total in '' | *[!0-9]*)
    echo "run.sh: SECONDS is a whole number, not '$total'" >&2
    exit 2
    ;;
esac
command -v timeout >/dev/null 2>&1 || {
    echo "run.sh: needs timeout (coreutils)" >&2
    exit 2
}
here=$(cd "$(dirname "$0")" && pwd)
bin=${GPU_BIN:-$here}
scripts=${GPU_SCRIPTS:-$here/bench}
[ -f "$scripts/gpu_table.sh" ] || [ -n "${GPU_SCRIPTS:-}" ] || scripts=$here/../../bench # tests/gpu in the tree
mkdir -p "$1" || exit 2
out=$(cd "$1" && pwd)
res=$out/gpu-results.txt
start=$(date +%s)
deadline=$((start + total))
# A hang in the library (a wait for a GPU, a collective) fails within a
# minute instead of its default 300 s.
MIRROR_TIMEOUT=60
export MIRROR_TIMEOUT
# GPU machines that are microVMs grow their memory as it is used: MemTotal
# at start is advice, not the limit (the header comment).
host_memory="MIRROR_HOST_MEMORY=${MIRROR_HOST_MEMORY:-advisory} ($([ -n "${MIRROR_HOST_MEMORY:-}" ] && echo "the caller's" ||
    echo "run.sh's: physical memory is advice, never a refusal"))"
MIRROR_HOST_MEMORY=${MIRROR_HOST_MEMORY:-advisory}
export MIRROR_HOST_MEMORY
if [ $mode = gpu ] && [ -z "${TORCHINDUCTOR_CACHE_DIR:-}" ]; then
    TORCHINDUCTOR_CACHE_DIR=$(mktemp -d "${TMPDIR:-/tmp}/mirror-torchinductor.XXXXXX") || exit 2
    torch_cache="TORCHINDUCTOR_CACHE_DIR=$TORCHINDUCTOR_CACHE_DIR (run.sh's own, removed at the end: no other process's cache)"
    trap 'rm -rf "$TORCHINDUCTOR_CACHE_DIR"' EXIT
    export TORCHINDUCTOR_CACHE_DIR
elif [ $mode = gpu ]; then
    torch_cache="TORCHINDUCTOR_CACHE_DIR=$TORCHINDUCTOR_CACHE_DIR (the caller's)"
fi
passed=0 failed=0 skipped=0 cut=0 peers=0
rm -rf "$out/smoke" "$out/trainer"
rm -f "$out"/bench_gpu.txt "$out"/bench_torch.txt "$out"/bench_torch_compile.txt "$out"/bench_fused_cuda.txt \
    "$out"/bench_torch_amp.txt "$out"/bench_digits.bin "$out"/bench-table.txt "$out"/profile-phases.txt \
    "$out"/profile-ncu.txt "$out"/profile-torch.txt
mkdir -p "$out/smoke" "$out/trainer" || exit 2
: >"$res"

say() {
    echo "$*" >>"$res"
    echo "$*"
}
ok() {
    passed=$((passed + 1))
    say "ok: $*"
}
failed() {
    failed=$((failed + 1))
    say "FAILED: $*"
}
skipped() {
    skipped=$((skipped + 1))
    say "skipped: $*"
}
cutshort() {
    cut=$((cut + 1))
    say "cut: $*"
}
peer() {
    peers=$((peers + 1))
    say "peer: $*"
}
# flunk CHECK WHY: the failure of what run() ran: mirror's, or with
# run_peer set (PyTorch, compute-sanitizer) the peer's, said as such, where
# the function run_blame (default: every failure) finds it is the peer's
# from the output file.
run_peer='' run_blame=anything
flunk() {
    if [ -n "$run_peer" ] && "$run_blame" "$r_file"; then
        peer "$1 ($run_peer failed, not mirror: $2)"
    else
        failed "$1 ($2)"
    fi
}
# peer_run PEER BLAME NAME CAP FILE VERIFY CMD...: run() for a program of
# a peer's (PEER), or one run under it, whose failures BLAME sorts.
peer_run() {
    run_peer=$1 run_blame=$2
    shift 2
    run "$@"
    pr_rc=$?
    run_peer='' run_blame=anything
    return $pr_rc
}
ending() { echo "$passed passed, $failed failed, $skipped skipped, $cut cut, $peers peer; $(($(date +%s) - start)) s of $total"; }
left() { echo $((deadline - $(date +%s))); }
# stage NAME [BUDGET]: a stage's heading; with BUDGET, its programs stop
# when BUDGET seconds have gone (a stage that hangs on every run must not
# take the time of the stages after it).
stage() {
    say "== $1"
    stage_end=$deadline
    [ -z "${2:-}" ] || stage_end=$(($(date +%s) + $2))
    case " ${GPU_SKIP:-} " in *" $1 "*)
        skipped "the $1 stage (GPU_SKIP)"
        return 1
        ;;
    esac
}
stage_end=$deadline
# seconds a program may still take: the stage's and the run's (3 s kept
# for the closing line)
room() {
    r_now=$(date +%s)
    if [ $((stage_end - r_now)) -lt $((deadline - 3 - r_now)) ]; then
        echo $((stage_end - r_now))
    else
        echo $((deadline - 3 - r_now))
    fi
}
last_words() { grep -v '^[[:space:]]*$' "$1" | tail -n 1 | cut -c1-200; }

# bounded CAP FILE CMD...: CMD with its output in FILE, for CAP seconds or
# the room left, whichever is less. Sets rc, took and by_deadline (1 when
# the room left was the bound).
bounded() {
    b_cap=$1 b_file=$2
    shift 2
    b_left=$(room)
    b_lim=$b_cap by_deadline=0
    if [ "$b_left" -lt "$b_cap" ]; then
        b_lim=$b_left by_deadline=1
    fi
    if [ "$b_lim" -lt 1 ]; then
        rc=124 took=0
        : >"$b_file"
        return
    fi
    b_t0=$(date +%s)
    timeout -k 3 "$b_lim" "$@" </dev/null >"$b_file" 2>&1
    rc=$?
    took=$(($(date +%s) - b_t0))
}

# run NAME CAP FILE VERIFY CMD...: "ok" when CMD exits 0 within its bound
# and the function VERIFY accepts FILE; a run stopped by the deadline (or
# the stage's budget) is "cut", one past its own CAP a failure (a hang).
run() {
    r_name=$1 r_cap=$2 r_file=$3 r_verify=$4
    shift 4
    if [ "$(room)" -lt 2 ]; then
        skipped "$r_name (no time left$([ "$stage_end" -lt "$deadline" ] && echo ' in the stage'))"
        return 1
    fi
    bounded "$r_cap" "$r_file" "$@"
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        if [ $by_deadline -eq 1 ]; then
            cutshort "$r_name (stopped by the deadline after $took s)"
        else
            flunk "$r_name" "no end in $r_cap s"
        fi
        return 1
    fi
    if [ $rc -ne 0 ]; then
        flunk "$r_name" "exit $rc: $(last_words "$r_file")"
        return 1
    fi
    if ! "$r_verify" "$r_file"; then
        flunk "$r_name" "$took s; ${r_file#"$out"/} lacks what was expected"
        return 1
    fi
    ok "$r_name ($took s)"
}
anything() { :; }

# ---- header ----------------------------------------------------------------
say "mirror GPU run"
say "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
if [ -f "$here/PACK.txt" ]; then
    say "commit: $(sed -n 's/^commit: //p' "$here/PACK.txt")"
    say "pack: $(sed -n 's/^built: //p' "$here/PACK.txt")"
else
    c=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
    git diff --quiet HEAD 2>/dev/null || c="$c (with uncommitted changes)"
    say "commit: $c"
fi
say "mode: $mode$([ $mode = cpu ] && echo ' (CPU replicas: the logic of every stage, no GPU asked for)')"
say "host: $(uname -n), $(getconf _NPROCESSORS_ONLN 2>/dev/null) cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1), $(getconf GNU_LIBC_VERSION 2>/dev/null)"
say "deadline: $total s"
say "host memory: $host_memory"
[ $mode = cpu ] || say "torch cache: $torch_cache"

# The programs need cuBLAS and (but for nonccl/) NCCL at start. Where the
# rpath and the ld cache do not find them: the CUDA toolkit's lib64, then
# the pip packages' nvidia/*/lib of python3 (nvidia/cublas/lib,
# nvidia/nccl/lib, nvidia/cu13/lib ...).
missing() { ldd "$1" 2>/dev/null | awk '/=> not found/ { print $1 }' | tr '\n' ' '; }
lib_dirs() {
    for d in ${CUDA_PATH:-} /usr/local/cuda; do
        echo "$d/lib64"
        echo "$d/targets/x86_64-linux/lib"
    done
    timeout 30 python3 -c '
import glob, os, site
roots = list(site.getsitepackages()) + [site.getusersitepackages()]
try:
    import nvidia
    roots += [os.path.dirname(p) for p in nvidia.__path__]
except Exception:
    pass
seen = set()
for r in roots:
    for d in sorted(glob.glob(os.path.join(r, "nvidia", "*", "lib"))):
        if d not in seen:
            seen.add(d)
            print(d)
' 2>/dev/null
}
need=$(missing "$bin/train_cuda")
if [ -n "$need" ]; then
    add=
    for d in $(lib_dirs); do
        for l in $need; do
            if [ -e "$d/$l" ]; then
                case ":$add:" in *":$d:"*) ;; *) add="$add:$d" ;; esac
            fi
        done
    done
    if [ -n "$add" ]; then
        LD_LIBRARY_PATH=${add#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        export LD_LIBRARY_PATH
        say "libraries: LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    fi
    need=$(missing "$bin/train_cuda")
fi
why=
case " $need " in *" libnccl"*) why="${need%% *} not found" ;; esac
[ "${GPU_FLAVOUR:-}" = nonccl ] && why="GPU_FLAVOUR=nonccl"
if [ -n "$why" ]; then
    if [ -x "$bin/nonccl/train_cuda" ]; then
        bin=$bin/nonccl
        need=$(missing "$bin/train_cuda")
        say "flavour: nonccl ($why: the programs built without NCCL)"
    else
        say "flavour: nccl ($why, and no nonccl/ beside it)"
    fi
else
    say "flavour: nccl"
fi
[ -z "$need" ] || say "missing: $need(the programs cannot start)"
gpus=$(timeout 10 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null)
if [ -n "$gpus" ]; then
    echo "$gpus" | while IFS= read -r g; do say "nvidia-smi: $g"; done
else
    say "nvidia-smi: $(command -v nvidia-smi >/dev/null 2>&1 && echo 'no GPU listed' || echo 'not found')"
fi
bounded 20 "$out/gpu_info.txt" "$bin/gpu_info" --versions
info_rc=$rc
grep -E '^[a-z0-9 ]+: ' "$out/gpu_info.txt" | while IFS= read -r l; do say "$l"; done
[ $mode = gpu ] || [ $info_rc -le 3 ] || say "gpu_info: exit $info_rc: $(last_words "$out/gpu_info.txt")"
count=$(sed -n 's/^gpus: \([0-9]*\).*/\1/p' "$out/gpu_info.txt")
# why the pack cannot run here: gpu_info's reason on its "gpus:" line
reason=$(sed -n 's/^gpus: [0-9a-z]* (\(.*\))$/\1/p' "$out/gpu_info.txt")
# stop WORDS LINE: the pack cannot run; LINE says why, the end line WORDS.
stop() {
    say "$2"
    say "== end: $1; $(ending)"
    exit 1
}
cpu_hint="run.sh --cpu OUTDIR runs the same logic on CPU replicas"
if [ $mode = gpu ]; then
    case $info_rc in
    0 | 2) ;;
    1)
        case $reason in
        "no NVIDIA driver found"*) stop "no driver" "no driver: $reason; $cpu_hint" ;;
        *) stop "no GPU" "no GPU: $reason; $cpu_hint" ;;
        esac
        ;;
    3) stop "driver too old" "driver too old: $reason" ;;
    *) stop "cannot start" "cannot start the pack's programs: $(last_words "$out/gpu_info.txt")" ;;
    esac
    [ "${count:-0}" -gt 0 ] || stop "no GPU" "no GPU: ${reason:-gpu_info counts none}; $cpu_hint"
    # the pack's code is for sm_75 and newer: an older GPU runs none of it
    g0=$(grep '^gpu 0: .*, code none' "$out/gpu_info.txt")
    [ -z "$g0" ] || stop "no code" "no code: GPU 0 takes none of the pack's code ($(sed -n 's/^code: //p' "$out/gpu_info.txt")): ${g0#gpu 0: }"
fi
[ $mode = cpu ] || [ $info_rc -eq 0 ] || failed "gpu_info: a kernel of the pack's own on GPU 0 ($(last_words "$out/gpu_info.txt"))"

# R replicas: of GPU 0, or CPU threads.
devices() {
    if [ $mode = cpu ]; then
        echo "cpu:$1"
    else
        case $1 in 1) echo cuda:0 ;; 2) echo cuda:0,0 ;; 4) echo cuda:0,0,0,0 ;; esac
    fi
}
kind=$([ $mode = cpu ] && echo CPU || echo CUDA)
# the trainer's output: on want_r replicas of the kind, in want_p, to its final: line
trained() {
    grep -q "^strategy: $want_r $kind replica" "$1" && grep -q "^final: replicas=$want_r .*precision=$want_p" "$1"
}

# ---- smoke -----------------------------------------------------------------
if stage smoke 60; then
    for p in fp32 fp16 bf16; do
        for r in 1 2; do
            want_r=$r want_p=$p
            run "train_cuda --devices $(devices $r) --precision $p: $r $kind replica(s), a final: line" 30 \
                "$out/smoke/$p-$r.out" trained "$bin/train_cuda" --devices "$(devices $r)" --model mlp \
                --synthetic 256 --batch 64 --epochs 1 --precision $p
        done
    done
fi

# ---- test_cuda -------------------------------------------------------------
if stage test_cuda; then
    if [ $mode = cpu ]; then
        skipped "test_cuda (GPU only)"
    elif [ "$(room)" -lt 10 ]; then
        skipped "test_cuda (no time left)"
    else
        f=$out/test_cuda.txt
        bounded 300 "$f" "$bin/test_cuda"
        line=$(grep -E '^test_cuda: [0-9]+ passed, [0-9]+ failed$' "$f" | tail -n 1)
        if [ -n "$line" ]; then
            tp=$(echo "$line" | sed -E 's/.*: ([0-9]+) passed.*/\1/')
            tf=$(echo "$line" | sed -E 's/.* ([0-9]+) failed$/\1/')
            passed=$((passed + tp)) failed=$((failed + tf))
            say "$line ($took s)"
            grep 'FAILED' "$f" | head -n 40 | while IFS= read -r l; do say "  $l"; done
            [ "$rc" -eq 0 ] || [ "$tf" -ne 0 ] || failed "test_cuda: exit $rc with no failed check"
        elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
            grep 'FAILED' "$f" | head -n 40 | while IFS= read -r l; do say "  $l"; done
            if [ $by_deadline -eq 1 ]; then cutshort "test_cuda (stopped by the deadline after $took s)"; else
                failed "test_cuda (no end in 300 s; last: $(last_words "$f"))"
            fi
        else
            failed "test_cuda: no result line (exit $rc: $(last_words "$f"))"
        fi
    fi
fi

# ---- trainer ---------------------------------------------------------------
# The CNN on a small synthetic set, one epoch: 8 steps of 64 samples. Plain
# is the GPU's default made explicit (CPU replicas default to deterministic
# mode and the sharded update), so that --cpu compares what a GPU does.
# same NAME A B: the runs A and B (trainer/A.out, .ckpt) ended on the same
# final: line (but the replica count and the speed) and the same checkpoint.
final_of() { grep '^final:' "$1" | cut -d' ' -f3- | sed 's/ samples_per_s.*//'; }
same() {
    a=$out/trainer/$2 b=$out/trainer/$3
    if [ ! -e "$a.passed" ] || [ ! -e "$b.passed" ]; then
        skipped "$1 (a run did not end)"
    elif [ -z "$(final_of "$a.out")" ] || [ "$(final_of "$a.out")" != "$(final_of "$b.out")" ]; then
        failed "$1 (the final: lines differ)"
    elif ! cmp "$a.ckpt" "$b.ckpt" >"$out/trainer/cmp.txt" 2>&1; then
        failed "$1 (the checkpoints differ: $(sed "s|$out/trainer/||g" "$out/trainer/cmp.txt" | last_words /dev/stdin))"
    else
        ok "$1"
    fi
}
if stage trainer 180; then
    for p in fp32 fp16 bf16; do
        for r in 1 4; do
            for m in plain graphs shard det; do
                case $m in
                plain) flags="--no-deterministic --shard-update off" ;;
                graphs) flags="--no-deterministic --shard-update off --graphs" ;;
                shard) flags="--no-deterministic --shard-update on" ;;
                det) flags=--deterministic ;;
                esac
                want_r=$r want_p=$p
                # $flags: its words, unquoted on purpose
                run "train_cuda $p $r replica(s) $m ($flags)" 30 "$out/trainer/$p-$r-$m.out" trained \
                    "$bin/train_cuda" --devices "$(devices $r)" --model cnn --synthetic 512 --batch 64 --epochs 1 \
                    --precision $p $flags --save "$out/trainer/$p-$r-$m.ckpt" && : >"$out/trainer/$p-$r-$m.passed"
            done
        done
        same "$p deterministic: 1 and 4 replicas, bit for bit" $p-1-det $p-4-det
        same "$p --graphs = without on 1 replica, bit for bit" $p-1-graphs $p-1-plain
        same "$p --graphs = without on 4 replicas, bit for bit" $p-4-graphs $p-4-plain
        same "$p --shard-update on = off on 4 replicas, bit for bit" $p-4-shard $p-4-plain
    done
fi

# ---- bench -----------------------------------------------------------------
# has WORD FILE: a line of FILE starts with WORD
has() { grep -q "^$1 " "$2"; }
has_mirror() { has mirror "$1"; }
has_torch() { has torch "$1"; }
has_fused() { has fused "$1"; }
has_amp() { has torch_amp "$1"; }
# bench/gpu_table.sh's comparison, into the results as it is
table() {
    timeout 30 sh "$scripts/gpu_table.sh" "$out" >"$out/bench-table.txt" 2>&1
    while IFS= read -r l; do say "$l"; done <"$out/bench-table.txt"
}
torch=
# the reason the peers' benchmarks are not run with --cpu
no_peers="--cpu runs mirror's programs alone; PyTorch's benchmarks run on a GPU, and in make bench-peers"
if stage bench; then
    gargs=$([ $mode = cpu ] && echo "--quick --devices cpu:2")
    targs="--modes eager,graphs"
    run "bench_gpu${gargs:+ $gargs}: mirror in fp32, fp16 and bf16, eager and graphs; the CNN on 1 to 8 replicas" 240 \
        "$out/bench_gpu.txt" has_mirror "$bin/bench_gpu" $gargs --out "$out"
    rc=1
    : >"$out/torch_version.txt"
    [ $mode = cpu ] || [ "$(room)" -lt 10 ] || bounded 90 "$out/torch_version.txt" python3 -c \
        'import torch, numpy; print("torch:", torch.__version__, "CUDA", torch.version.cuda, "with a GPU" if torch.cuda.is_available() else "no GPU")'
    if [ $mode = cpu ]; then
        skipped "bench_torch.py ($no_peers)"
    elif [ $rc -eq 0 ]; then
        torch=1
        say "$(last_words "$out/torch_version.txt")"
        peer_run PyTorch anything "bench_torch.py $targs" 240 "$out/bench_torch.txt" has_torch python3 "$scripts/bench_torch.py" $targs \
            --dir "$out"
    else
        why=$(last_words "$out/torch_version.txt")
        say "torch: not importable (${why:-no time left to try})"
        skipped "bench_torch.py (PyTorch not importable: mirror's figures only)"
    fi
    if [ $mode = cpu ]; then
        skipped "bench_fused_cuda (GPU only)"
        skipped "bench_torch_amp.py (GPU only)"
    else
        run "bench_fused_cuda: the fused mixed-precision update against the copy" 120 "$out/bench_fused_cuda.txt" \
            has_fused "$bin/bench_fused_cuda"
        if [ -n "$torch" ]; then
            peer_run PyTorch anything "bench_torch_amp.py: PyTorch's AMP update" 120 "$out/bench_torch_amp.txt" has_amp \
                python3 "$scripts/bench_torch_amp.py"
        else
            skipped "bench_torch_amp.py (PyTorch not importable)"
        fi
    fi
    table
fi

# ---- sanitizer -------------------------------------------------------------
# The deliberate out-of-memory test and NCCL's own probing return API
# errors on purpose: memcheck reports memory errors, not those. racecheck
# sees races in shared memory only. MIRROR_TEST_SANITIZER skips the 17 GB
# kernel over 2^31 elements.
sanitized() { grep -qE '^test_cuda: [0-9]+ passed, 0 failed$' "$1"; }
# A failure that is compute-sanitizer's own, not test_cuda's: it could not
# start (exit 126, 127), or said it cannot run here ("Device not supported"
# on a gVisor-style runtime, its injection library or its own error), or
# test_cuda printed nothing under it. Found errors (exit 99) and test_cuda's
# own result line are mirror's.
sanitizer_own() {
    case $rc in 126 | 127) return 0 ;; 99) return 1 ;; esac
    ! grep -qE '^test_cuda: [0-9]+ passed, [0-9]+ failed$' "$1" || return 1
    grep -qiE 'device not supported|internal sanitizer error|injection library' "$1" && return 0
    ! grep -qv '^=========' "$1"
}
if stage sanitizer; then
    san=$(command -v compute-sanitizer 2>/dev/null)
    for d in ${CUDA_PATH:-} /usr/local/cuda; do
        [ -n "$san" ] || [ ! -x "$d/bin/compute-sanitizer" ] || san=$d/bin/compute-sanitizer
    done
    for tool in memcheck racecheck; do
        if [ $mode = cpu ]; then
            skipped "compute-sanitizer --tool $tool (GPU only)"
        elif [ -z "$san" ]; then
            skipped "compute-sanitizer --tool $tool (not in PATH, \$CUDA_PATH/bin or /usr/local/cuda/bin)"
        elif [ "$(room)" -lt 30 ]; then
            skipped "compute-sanitizer --tool $tool (under 30 s left)"
        else
            peer_run compute-sanitizer sanitizer_own "compute-sanitizer --tool $tool over test_cuda ops" 300 "$out/sanitizer-$tool.txt" sanitized \
                env MIRROR_TEST_SANITIZER=1 "$san" --tool $tool --report-api-errors no --error-exitcode 99 \
                "$bin/test_cuda" ops
        fi
    done
fi

# ---- profile ---------------------------------------------------------------
# The CNN is the workload where mirror trails PyTorch on a GPU (0.86x in
# fp32 on an H200, against cuDNN's convolutions): where each spends a step.
# The trainer's phases (--phases; the data on the device, 10 steps of 512,
# 2 on CPU replicas), then its kernels under ncu (one metric, each kernel's
# time, summed per kernel name; the clocks left alone), and PyTorch's
# kernels under torch.profiler. ncu and PyTorch are peers: their failures
# are theirs.
phased() { grep -q '^phases (ms per step' "$1" && trained "$1"; }
ncu_timed() { grep -q 'gpu__time_duration.sum' "$1"; }
torch_profiled() { grep -q '^device time a step: ' "$1"; }
if stage profile; then
    want_r=1 want_p=fp32
    run "the CNN's step at batch 512, phase by phase (train_cuda --phases)" 60 "$out/profile-phases.txt" phased \
        "$bin/train_cuda" --devices "$(devices 1)" --model cnn --synthetic $([ $mode = cpu ] && echo 1024 || echo 5120) \
        --batch 512 --epochs 1 --no-deterministic --phases
    say "$(grep '^phases' "$out/profile-phases.txt" 2>/dev/null)"
    ncu=$(command -v ncu 2>/dev/null)
    for d in ${CUDA_PATH:-} /usr/local/cuda; do
        [ -n "$ncu" ] || [ ! -x "$d/bin/ncu" ] || ncu=$d/bin/ncu
    done
    if [ $mode = cpu ]; then
        skipped "ncu over the trainer's CNN (GPU only)"
        skipped "profile_torch.py: PyTorch's CNN under torch.profiler (GPU only)"
    else
        if [ -z "$ncu" ]; then
            skipped "ncu over the trainer's CNN (not in PATH, \$CUDA_PATH/bin or /usr/local/cuda/bin)"
        else
            peer_run ncu anything "ncu over the trainer's CNN: each kernel's time" 120 "$out/profile-ncu.txt" ncu_timed \
                "$ncu" --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel \
                "$bin/train_cuda" --devices cuda:0 --model cnn --synthetic 2560 --batch 512 --epochs 1
        fi
        if [ -n "$torch" ]; then
            peer_run PyTorch anything "profile_torch.py: PyTorch's CNN under torch.profiler" 120 "$out/profile-torch.txt" \
                torch_profiled python3 "$scripts/profile_torch.py" --dir "$out"
            say "torch: $(grep '^device time a step: ' "$out/profile-torch.txt" 2>/dev/null)"
        else
            skipped "profile_torch.py (PyTorch not importable, or no bench stage)"
        fi
    fi
fi

# ---- mpi -------------------------------------------------------------------
# One process on GPU 0; with two GPUs or more two processes, a GPU each,
# one NCCL communicator over both.
two_ranks() {
    grep -q '^strategy: 2 replicas in 2 processes; rank 0 has CUDA replica 0 cuda:.*nccl across processes' "$1" &&
        [ "$(grep -c '^final:' "$1")" -eq 1 ]
}
if stage mpi; then
    if [ $mode = cpu ] || [ ! -x "$bin/train_cuda_mpi" ]; then
        skipped "mpirun train_cuda_mpi (not built: the pack has no MPI)"
    elif ! command -v mpirun >/dev/null 2>&1; then
        skipped "mpirun train_cuda_mpi (no mpirun)"
    else
        OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
        export OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM
        want_r=1 want_p=fp32
        run "mpirun -np 1 train_cuda_mpi: a CUDA replica, a final: line" 120 "$out/mpi-1.txt" trained \
            mpirun -np 1 "$bin/train_cuda_mpi" --model cnn --epochs 1 --synthetic 4000
        if [ "${count:-0}" -ge 2 ]; then
            run "mpirun -np 2 train_cuda_mpi: a GPU per process, NCCL across them, one final: line" 120 \
                "$out/mpi-2.txt" two_ranks mpirun -np 2 "$bin/train_cuda_mpi" --model cnn --epochs 1 --synthetic 4000
        fi
    fi
fi

# ---- compile ---------------------------------------------------------------
# Last: a dozen Inductor compiles take minutes and add PyTorch's side only.
# What it measured before the deadline still enters the table.
if stage compile; then
    if [ $mode = cpu ]; then
        skipped "bench_torch.py --modes compile ($no_peers)"
    elif [ -z "$torch" ]; then
        skipped "bench_torch.py --modes compile (PyTorch not importable, or no bench stage)"
    elif [ "$(room)" -lt 60 ]; then
        skipped "bench_torch.py --modes compile (under 60 s left)"
    else
        peer_run PyTorch anything "bench_torch.py --modes compile" 3600 "$out/bench_torch_compile.txt" has_torch \
            python3 "$scripts/bench_torch.py" --modes compile --dir "$out"
        if grep -q '^torch ' "$out/bench_torch_compile.txt" 2>/dev/null; then
            say "the table again, with torch.compile:"
            table
        fi
    fi
fi

say "== end: $(ending)"
[ $failed -eq 0 ]
