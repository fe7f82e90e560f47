# tests/checks.sh - the helpers of tests/run.sh and tests/pack_test.sh,
# sourced with BUILD set: checks_start, check and tally add up "N passed,
# N failed"; gpu_here. A failed check keeps what explains it: its output and
# the files it wrote in $tmp go to $BUILD/failures/ (pack_test.sh's to
# $BUILD/failures-pack/), and its FAILED line names the log there, with its
# last lines; a test program's FAILED lines name its whole output
# ($BUILD/NAME.out). run.sh checks these helpers on a check made to fail.

# checks_start LOG FAILURES: the counts at zero, LOG (every check's output,
# appended) emptied, FAILURES (the last run's kept failures) removed, and
# $tmp, the checks' scratch directory, made (removed on exit; full: the
# full-disk check's tmpfs, unmounted first).
checks_start() {
    passed=0
    failed=0
    checks=0
    log=$1
    failures=$2
    : >"$log" || exit 1
    rm -rf "$failures"
    tmp=$(mktemp -d) || exit 1
    trap 'umount "$tmp/full" 2>/dev/null; rm -rf "$tmp"' EXIT
}

# One check: a name and a command; passes when the command exits 0. The
# command runs in this shell (a function may set variables for later ones).
check() {
    c_name=$1
    shift
    checks=$((checks + 1))
    # what the check writes in $tmp is newer (by a second: the kernel's
    # file times are coarser than its clock; a file of the check before may
    # come along)
    touch -d '1 second ago' "$tmp/.check.start"
    "$@" >"$tmp/.check.out" 2>&1
    c_rc=$?
    cat "$tmp/.check.out" >>"$log"
    if [ $c_rc -eq 0 ]; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        keep_failure "$c_name" $c_rc "$@"
        echo "FAILED: $c_name (exit $c_rc; its output and files: $k_log)"
        grep -v '^[[:space:]]*$' "$tmp/.check.out" | tail -n 5 | cut -c1-300 | sed 's/^/    /'
    fi
    return 0
}

# keep_failure NAME RC CMD...: FAILURES/NNN-NAME.log (the check's number
# and its name in lowercase words) with the command, its exit status and
# output; the files of $tmp that it wrote or that its command names (an
# output made before the check and read by it) under FAILURES/NNN-NAME/,
# each listed in the log (one over 16 MiB listed, not copied). Sets k_log.
keep_failure() {
    k_slug=$(printf '%03d-%s' "$checks" "$(printf '%s' "$1" | tr 'A-Z' 'a-z' | tr -cs 'a-z0-9' '-' | cut -c1-60 |
        sed 's/^-*//; s/-*$//')")
    k_log=$failures/$k_slug.log
    mkdir -p "$failures" || return
    {
        echo "check: $1"
        echo "exit: $2"
        shift 2
        echo "command: $*"
        echo "output:"
        cat "$tmp/.check.out"
        echo "files the check wrote in $tmp:"
    } >"$k_log"
    {
        find "$tmp" -newer "$tmp/.check.start" -type f ! -name '.check.*'
        for k_arg in "$@"; do printf '%s\n' "$k_arg" | grep -oE "$tmp/[A-Za-z0-9._/+-]+"; done
    } 2>/dev/null | sort -u | while IFS= read -r k_f; do
        [ -f "$k_f" ] || continue
        k_rel=${k_f#"$tmp"/}
        k_size=$(wc -c <"$k_f")
        if [ "$k_size" -gt 16777216 ]; then
            echo "  $k_rel ($k_size bytes, not kept)"
        elif mkdir -p "$failures/$k_slug/$(dirname "$k_rel")" && cp "$k_f" "$failures/$k_slug/$k_rel"; then
            echo "  $failures/$k_slug/$k_rel"
        fi
    done >>"$k_log"
}

# Adds up the result line of one test program: its name, its output file
# (kept: the FAILED lines shown name it) and its exit status.
tally() {
    name=$1
    out=$2
    rc=$3
    line=$(grep -E '^[a-z_0-9]+: [0-9]+ passed, [0-9]+ failed$' "$out" | tail -n 1)
    if [ -z "$line" ]; then
        echo "FAILED: $name: no result line (exit $rc; its output: $out)"
        tail -n 20 "$out"
        failed=$((failed + 1))
        return
    fi
    echo "$line"
    p=$(echo "$line" | sed -E 's/.*: ([0-9]+) passed.*/\1/')
    f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed$/\1/')
    passed=$((passed + p))
    failed=$((failed + f))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "FAILED: $name: exit $rc with no failed check (sanitizer or crash; its output: $out)"
        failed=$((failed + 1))
    fi
    [ "$f" -ne 0 ] || [ "$rc" -ne 0 ] && grep -E 'FAILED|ERROR|runtime error' "$out" | head -n 20 | sed "s|\$| ($out)|"
}

# Whether this machine has a GPU, found without the trainer: the driver's
# own list (nvidia-smi, or /proc where the driver is loaded).
gpu_here() {
    nvidia-smi -L 2>/dev/null | grep -q '^GPU ' || ls /proc/driver/nvidia/gpus/* >/dev/null 2>&1
}
