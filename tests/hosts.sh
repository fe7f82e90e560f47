#!/bin/sh
# tests/hosts.sh - several machines on this one: network namespaces joined
# by a bridge, each a test host with its own address and hostname that
# talks TCP to the others as machines do, and Open MPI starting
# build/train_mpi on them through an rsh agent that enters a namespace.
# Checks: 2 and 3 hosts train as one process does, byte for byte; a host
# cut off, a rank killed (SIGKILL) or frozen (SIGSTOP) ends the job within
# the timeout plus 30 s, with rank 0's checkpoint of the last complete step
# (when rank 0 survives; a kill: when Open MPI lets it, see below), which
# resumed on one process ends where the uninterrupted job ends; a host cut
# off from an mpirun without the keepalive settings, which then waits on
# it for minutes, ends at a SIGINT with the same checkpoint; a job stopped by SIGTERM resumes on one process
# of 3 replicas to the checkpoint of the uninterrupted job.
#
# Needs root, ip (iproute2), unshare and Open MPI; skipped with a line
# elsewhere. Only the namespaces, bridge and addresses it makes are used,
# and it removes them when it ends, also on failure. Called by tests/run.sh
# (make test); the last line is "hosts: N passed, N failed".
BUILD=${BUILD:-build}
MPIRUN=${MPIRUN:-mpirun}
passed=0
failed=0
log=$BUILD/hosts.log
: >"$log"

done_with() {
    echo "$1"
    echo "hosts: $passed passed, $failed failed"
    exit 0
}
[ "$(id -u)" = 0 ] || done_with "hosts: skipped: network namespaces need root"
for tool in ip unshare "$MPIRUN"; do
    command -v "$tool" >/dev/null || done_with "hosts: skipped: no $tool"
done
[ -x "$BUILD/train_mpi" ] && [ -x "$BUILD/train" ] || done_with "hosts: skipped: no $BUILD/train_mpi"

# Names of this run's own (the process id keeps two runs apart), and a
# /24 that no interface of this machine is on.
tag=$$
bridge=mbr$tag
for third in $(seq $((tag % 200)) 255); do
    net=10.213.$third
    ip -4 addr | grep -q " $net\." || break
done
tmp=$(mktemp -d)
hosts=""

cleanup() {
    for h in $hosts; do
        pids=$(ip netns pids "m$tag-$h" 2>/dev/null)
        [ -n "$pids" ] && kill -9 $pids 2>/dev/null
        ip netns del "m$tag-$h" 2>/dev/null
    done
    ip link del "$bridge" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# The bridge at $net.1 (this machine: mpirun), hosts h1, h2, h3 at
# $net.11, .12, .13, each behind a veth pair whose outer end is mv<tag>h<i>.
ip link add "$bridge" type bridge 2>>"$log" && ip addr add "$net.1/24" dev "$bridge" && ip link set "$bridge" up ||
    done_with "hosts: skipped: cannot make a bridge here (ip link add type bridge)"
for i in 1 2 3; do
    h=h$i
    ns=m$tag-$h
    ip netns add "$ns" 2>>"$log" || done_with "hosts: skipped: ip netns add failed"
    hosts="$hosts $h"
    ip link add "mv${tag}$h" type veth peer name eth0 netns "$ns" &&
        ip link set "mv${tag}$h" master "$bridge" up &&
        ip -n "$ns" addr add "$net.1$i/24" dev eth0 && ip -n "$ns" link set eth0 up && ip -n "$ns" link set lo up ||
        done_with "hosts: skipped: cannot wire the namespace $ns"
done

# Open MPI's rsh agent: "agent ADDRESS COMMAND...": COMMAND in the
# namespace of the host at ADDRESS, under that host's name.
cat >"$tmp/agent" <<EOF
#!/bin/sh
host=h\${1##*.1}
shift
exec ip netns exec m$tag-\$host unshare --uts sh -c "hostname \$host; \$*"
EOF
chmod +x "$tmp/agent"
for n in 1 2 3; do
    for i in $(seq $n); do echo "$net.1$i slots=1"; done >"$tmp/hosts$n"
done

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MIRROR_TIMEOUT=10
# mpirun over the first n hosts, as tools/reference.md's multi-machine section
# says: TCP on the hosts' network, a lost host noticed within seconds
# (TCP keepalive on Open MPI's own connections), time for rank 0 to save
# between mpirun's SIGTERM and its SIGKILL.
keepalive="--mca oob_tcp_keepalive_time 2 --mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 3"
on_hosts() {
    n=$1
    shift
    timeout 120 "$MPIRUN" --hostfile "$tmp/hosts$n" -np "$n" --bind-to none \
        --mca plm_rsh_agent "$tmp/agent" --mca plm_rsh_no_tree_spawn 1 \
        --mca btl tcp,self --mca btl_tcp_if_include "$net.0/24" --mca oob_tcp_if_include "$net.0/24" \
        $keepalive --mca odls_base_sigkill_timeout 5 -x MIRROR_TIMEOUT "$BUILD/train_mpi" "$@"
}

check() {
    name=$1
    shift
    echo "== $name ($(date +%s))" >>"$log"
    if "$@" >>"$log" 2>&1; then
        passed=$((passed + 1))
        echo "ok: $name"
    else
        failed=$((failed + 1))
        echo "FAILED: $name (see $log)"
    fi
}

# The run every case below cuts short: 200 epochs of 6 steps (a few seconds), deterministic.
run="--model mlp --synthetic 300 --batch 50 --epochs 200 --deterministic --replicas 1"
if ! "$BUILD/train" $run --save "$tmp/one.ckpt" >"$tmp/one.out" 2>&1; then
    failed=1
    done_with "FAILED: $BUILD/train $run"
fi

# Across hosts, 20 epochs of it (3 processes on 2 cores wait on each other's cores).
"$BUILD/train" $run --epochs 20 --save "$tmp/one20.ckpt" >/dev/null 2>&1
across() {
    on_hosts "$1" $run --epochs 20 --save "$tmp/across$1.ckpt" >"$tmp/across$1.out" 2>&1 &&
        cmp "$tmp/across$1.ckpt" "$tmp/one20.ckpt"
}
check "train_mpi across 2 test hosts, deterministic: the checkpoint of one process, byte for byte" across 2
check "train_mpi across 3 test hosts, deterministic: the checkpoint of one process, byte for byte" across 3

# The ranks on the hosts named: the train_mpi processes there.
ranks_on() {
    for h in "$@"; do
        for p in $(ip netns pids "m$tag-$h"); do
            [ "$(cat /proc/"$p"/comm 2>/dev/null)" = train_mpi ] && echo "$p"
        done
    done
}

# Starts a job on 2 hosts in the background ($job), its output into $1,
# with the trainer's flags after $2, and waits until it reaches epoch $2.
start_job() {
    out=$1
    epoch=$2
    shift 2
    on_hosts 2 "$@" >"$out" 2>&1 &
    job=$!
    for i in $(seq 200); do
        grep -q "^epoch $epoch/" "$out" && break
        sleep 0.1
    done
}

# Starts the run on 2 hosts, waits for epoch 3, does what $1 says to host
# h2 (rank 1) or h1 (rank 0), and times the job's end into $took.
cut_short() {
    rm -f "$tmp/cut.ckpt"
    start_job "$tmp/cut.out" 3 $run --save "$tmp/cut.ckpt"
    start=$(date +%s)
    case $1 in
    cut-h1 | cut-h2) ip link set "mv${tag}${1#cut-}" down ;;
    KILL | STOP) kill -"$1" $(ranks_on h2) ;;
    esac
    wait $job
    rc=$?
    took=$(($(date +%s) - start))
    cat "$tmp/cut.out"
    echo "the job ended with $rc, $took s after $1"
    [ "$1" = STOP ] && kill -CONT $(ranks_on h2) 2>/dev/null
    case $1 in cut-h*) ip link set "mv${tag}${1#cut-}" up ;; esac
    test $rc -ne 0 && test $rc -ne 124 && test $took -le 40
}

# ... and rank 0's checkpoint, resumed on one process, ends where the
# uninterrupted run ends.
saved_and_resumed() {
    grep -q "rank 0 saved the last complete step, step [0-9]* (epoch [0-9]*, [0-9]* steps into it), to $tmp/cut.ckpt" \
        "$tmp/cut.out" &&
        "$BUILD/train" $run --replicas 2 --resume "$tmp/cut.ckpt" --save "$tmp/resumed.ckpt" >"$tmp/resumed.out" 2>&1 &&
        grep '^resume: ' "$tmp/resumed.out" && cmp "$tmp/resumed.ckpt" "$tmp/one.ckpt"
}
survives() { cut_short "$1" && saved_and_resumed; }
check "host 2 cut off: the job ends within the timeout + 30 s; rank 0 saved the last complete step, resumed to the end" \
    survives cut-h2
# Without the keepalive settings mpirun does not notice the lost host: rank
# 0 saves and leaves at its timeout, and mpirun's teardown then waits on
# TCP's retransmissions to the lost host's daemon (net.ipv4.tcp_retries2,
# about 15 minutes). A SIGINT (Ctrl-C) ends it at once, with a crash in
# PMIx_Finalize that changes nothing; the checkpoint is whole before it.
unnoticed() {
    rm -f "$tmp/cut.ckpt"
    with=$keepalive
    keepalive=
    start_job "$tmp/cut.out" 3 $run --save "$tmp/cut.ckpt"
    keepalive=$with
    start=$(date +%s)
    ip link set "mv${tag}h2" down
    for i in $(seq 40); do
        grep -q 'rank 0 saved the last complete step' "$tmp/cut.out" && break
        sleep 1
    done
    saved=$(($(date +%s) - start))
    sleep 5
    mpirun_pid=
    for p in $(pgrep -P "$(pgrep -P $job | tr '\n' ,)0"); do
        [ "$(cat /proc/"$p"/comm 2>/dev/null)" = "$(basename "$MPIRUN")" ] && mpirun_pid=$p
    done
    echo "rank 0 saved within $saved s of the cut; 5 s later mpirun (${mpirun_pid:-none}) is still there"
    stop=$(date +%s)
    if [ -n "$mpirun_pid" ]; then
        kill -INT "$mpirun_pid"
        # the forcible end Open MPI offers, should the first not do
        for i in 1 2 3; do kill -0 "$mpirun_pid" 2>/dev/null && sleep 1; done
        kill -0 "$mpirun_pid" 2>/dev/null && echo "a second SIGINT" && kill -INT "$mpirun_pid"
    else
        echo "mpirun had ended already (an Open MPI, or a net.ipv4.tcp_retries2, that does not wait)"
    fi
    wait $job
    rc=$?
    took=$(($(date +%s) - stop))
    cat "$tmp/cut.out"
    echo "the job ended with $rc, $took s after the SIGINT"
    ip link set "mv${tag}h2" up
    # what the lost host still runs (its daemon, which lost mpirun) goes
    # before the next case shares the cores
    for p in $(ip netns pids "m$tag-h2"); do kill -9 "$p" 2>/dev/null; done
    test $saved -le 25 && test $rc -ne 0 && test $rc -ne 124 && test $took -le 5 && saved_and_resumed
}
check "host 2 cut off, mpirun without the keepalive settings: rank 0 saves; mpirun, waiting on the lost host, ends at a SIGINT; the checkpoint resumes to the end" \
    unnoticed
# A killed rank's peers see its connections reset, and Open MPI 4.1's TCP
# transport then holds rank 0 inside MPI_Test now and then (a lock it takes
# twice, or its help message waiting on the host's daemon, busy ending the
# job) until mpirun's SIGKILL: in 10 of 41 runs here. Then nothing is saved,
# and no checkpoint is at the path (never a half-written one); otherwise
# the checkpoint resumes.
killed() {
    cut_short KILL || return 1
    grep -q 'rank 0 saved the last complete step' "$tmp/cut.out" && { saved_and_resumed; return; }
    echo "rank 0 saved nothing (held inside Open MPI until its SIGKILL)"
    ! grep -q 'rank 0 could not save' "$tmp/cut.out" && ! test -e "$tmp/cut.ckpt"
}
check "rank 1 killed (SIGKILL): the job ends within the timeout + 30 s; rank 0's checkpoint, when it saves, resumes to the end" \
    killed
check "rank 1 frozen (SIGSTOP): the job ends within the timeout + 30 s; rank 0's checkpoint resumes to the run's end" \
    survives STOP
# Rank 0's host cut off: the job ends all the same; no checkpoint can be
# promised (the checkpoints of --checkpoint-every are the safety net).
# The lost host's processes end too, once its daemon has lost mpirun.
rank0_lost() {
    cut_short cut-h1 || return 1
    for i in $(seq 40); do
        [ -z "$(ip netns pids "m$tag-h1")" ] && return 0
        sleep 1
    done
    echo "processes left on the lost host:"
    ps -o pid,args -p "$(ip netns pids "m$tag-h1" | tr '\n' ',')0"
    return 1
}
check "host 1 (rank 0) cut off: the job ends within the timeout + 30 s, and nothing is left running on the lost host" \
    rank0_lost

# Elastic resume: a job of 2 hosts stopped by SIGTERM mid-epoch, resumed
# on one process of 3 replicas, ends with the checkpoint of the same job
# uninterrupted, byte for byte: SyncBatchNorm, dropout, augmentation and a
# cosine schedule with warmup.
elastic="--model cnn-bn --synthetic 400 --batch 40 --epochs 12 --deterministic --dropout 0.2 --augment
         --lr-schedule cosine --warmup 5 --replicas 1"
elastic_resume() {
    on_hosts 2 $elastic --save "$tmp/whole.ckpt" >"$tmp/whole.out" 2>&1 || return 1
    start_job "$tmp/part.out" 2 $elastic --save "$tmp/part.ckpt"
    sleep 0.3
    kill -TERM $(ranks_on h1 h2) # as a scheduler signals every process of a job
    wait $job
    cat "$tmp/part.out"
    grep -q 'stopped before step' "$tmp/part.out" &&
        "$BUILD/train" $elastic --replicas 3 --resume "$tmp/part.ckpt" --save "$tmp/elastic.ckpt" \
            >"$tmp/elastic.out" 2>&1 &&
        grep '^resume: ' "$tmp/elastic.out" && cmp "$tmp/elastic.ckpt" "$tmp/whole.ckpt"
}
check "2 hosts stopped by SIGTERM mid-epoch, resumed on one process of 3 replicas: the uninterrupted job's checkpoint" \
    elastic_resume

echo "hosts: $passed passed, $failed failed"
