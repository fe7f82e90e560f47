#!/bin/sh
# tests/fake_memory.sh KB fixed|grows [CGROUP_BYTES] -- CMD [ARG...]
# CMD on a machine that says what the test wants of its memory: in a
# mount namespace of its own, /proc/meminfo gives "MemTotal: KB kB",
# /sys/bus/virtio/drivers holds a bound virtio balloon and /proc/vmstat
# says it holds 1 GiB (grows: a microVM whose memory grows as it is used)
# or /sys/bus/virtio/drivers holds no driver at all (fixed), and with
# CGROUP_BYTES /sys/fs/cgroup holds that memory limit at its root (both
# cgroup v2's memory.max and v1's memory.limit_in_bytes). CMD's exit
# status is this script's; 77 when the namespace cannot be made (unshare
# needs root). Nothing outlives CMD: the mounts go with the namespace, the
# files with the script.
set -u
usage() {
    echo "usage: tests/fake_memory.sh KB fixed|grows [CGROUP_BYTES] -- CMD [ARG...]" >&2
    exit 2
}
[ $# -ge 4 ] || usage
kb=$1 kind=$2
shift 2
limit=
if [ "$1" != -- ]; then
    limit=$1
    shift
fi
[ "${1:-}" = -- ] || usage
shift
case $kind in fixed | grows) ;; *) usage ;; esac
if ! unshare -m true 2>/dev/null; then
    echo "fake_memory: no mount namespace here (unshare -m needs root)" >&2
    exit 77
fi
dir=$(mktemp -d) || exit 77
trap 'rm -rf "$dir"' EXIT
sed "s/^MemTotal:.*/MemTotal:       $kb kB/" /proc/meminfo >"$dir/meminfo"
grep -v '^nr_balloon_pages ' /proc/vmstat >"$dir/vmstat"
echo "nr_balloon_pages $((262144 * 4096 / $(getconf PAGESIZE)))" >>"$dir/vmstat"
mkdir -p "$dir/cgroup/memory"
if [ -n "$limit" ]; then
    echo "$limit" >"$dir/cgroup/memory.max"
    echo "$limit" >"$dir/cgroup/memory/memory.limit_in_bytes"
fi
# the fake's mounts, then CMD in its place ("$@" passed through)
unshare -m sh -c '
    dir=$1 kind=$2 limit=$3
    shift 3
    mount --bind "$dir/meminfo" /proc/meminfo || exit 77
    [ "$kind" = fixed ] || mount --bind "$dir/vmstat" /proc/vmstat || exit 77
    if [ -d /sys/bus/virtio/drivers ]; then
        mount -t tmpfs fake /sys/bus/virtio/drivers || exit 77
        [ "$kind" = fixed ] || mkdir -p /sys/bus/virtio/drivers/virtio_balloon/virtio0
    elif [ "$kind" = grows ]; then
        mount -t tmpfs fake /sys/bus || exit 77
        mkdir -p /sys/bus/virtio/drivers/virtio_balloon/virtio0
    fi
    for d in /sys/bus/vmbus/drivers /sys/devices/system/xen_memory; do
        [ ! -d "$d" ] || mount -t tmpfs fake "$d" || exit 77
    done
    [ -z "$limit" ] || mount --bind "$dir/cgroup" /sys/fs/cgroup || exit 77
    exec "$@"
' sh "$dir" "$kind" "$limit" "$@"
