#!/bin/bash
# Local Slurm cluster for the tests, on ONE host, without systemd, cgroups or real GPUs:
#   munged + slurmctld + slurmd node1 (127.0.0.1:17001) and node2 (127.0.0.1:17002), and node3
#   (127.2.0.2:17003) whose slurmd runs in its own network namespace, so that it can be cut off.
#   One fake GPU per node; partitions gpu (default) and owner on node1,node2, far on node3.
# Needs root (daemons, mknod, network namespace). Used by tests/slurm_cluster.py; by hand:
#
#   testbed.sh install            apt-get the packages (nothing if they are there)
#   testbed.sh start              stop whatever of ours still runs, recreate /tmp/gpuckpt_slurm, start
#                                 munged, slurmctld and the slurmd's, wait until every node is idle
#   testbed.sh stop               stop everything this script started (by PID), remove the netns
#   testbed.sh status             sinfo + squeue
#   testbed.sh kill-node NODE     SIGKILL NODE's slurmd, its slurmstepd's and their job processes
#   testbed.sh start-node NODE    start NODE's slurmd (nothing if it runs)
#   testbed.sh revive             start-node for every node, uncut-node3
#   testbed.sh cut-node3          take the veth to node3 down: node3 unreachable, its jobs keep running
#   testbed.sh uncut-node3        bring it back up
#   testbed.sh pids-of-node NODE  the PIDs kill-node would hit
#
# Clients need:  export SLURM_CONF=/tmp/gpuckpt_slurm/etc/slurm.conf
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BASE=/tmp/gpuckpt_slurm                  # must match the paths inside slurm.conf/gres.conf
RUN=$BASE/run                            # *.ourpid = PIDs of the daemons this script started
export SLURM_CONF=$BASE/etc/slurm.conf
NS=gpuckpt_n3 VETH_HOST=gck_vh VETH_NS=gck_vc   # interface names: 15 characters at most
NODES="node1 node2 node3"

log() { echo "[testbed $(date +%T.%3N)] $*" >&2; }

alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }

ourpid() { cat "$RUN/$1.ourpid" 2>/dev/null || true; }

# run "$@" in its own session with every inherited fd > 2 closed: a daemon that inherits e.g. the
# caller's stdout pipe keeps the caller (subprocess.run in a fixture) waiting forever
spawn() {
    local fd
    for fd in $(ls /proc/$BASHPID/fd); do
        [ "$fd" -gt 2 ] && eval "exec $fd>&-" 2>/dev/null || true
    done
    exec setsid "$@"
}

do_install() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null &&
       command -v munged >/dev/null && command -v ip >/dev/null && command -v nsenter >/dev/null; then
        log "slurm, munge, iproute2 and util-linux already installed"; return
    fi
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        slurmctld slurmd slurm-client munge iproute2 util-linux
}

# cgroup.conf depends on the Slurm version. slurmd always initialises a cgroup plugin, even with
# proctrack/linuxproc and task/none. Since 24.05 (Debian 13 has 24.11) "CgroupPlugin=disabled" turns
# that off; on a cgroup v2 host without systemd the autodetected cgroup/v2 would otherwise need a
# systemd scope. 22.05 (Debian 12) and 23.x do not know "disabled" (it is a fatal config error there):
# they autodetect (cgroup v1, as on the Debian 12 VM this was checked on, just works) and, on cgroup
# v2, IgnoreSystemdOnFailure=yes lets them build their cgroups by hand when systemd does not answer.
write_cgroup_conf() {
    local ver major minor
    ver=$(slurmd -V | grep -oE '[0-9]+\.[0-9]+' | head -1)
    major=${ver%%.*} minor=${ver#*.}
    {
        echo "# written by testbed.sh for Slurm $ver"
        if [ "$major" -gt 24 ] || { [ "$major" = 24 ] && [ "$((10#$minor))" -ge 5 ]; }; then
            echo "CgroupPlugin=disabled"
        else
            echo "IgnoreSystemdOnFailure=yes"
        fi
    } >"$BASE/etc/cgroup.conf"
}

start_munge() {
    mkdir -p /run/munge && chown munge:munge /run/munge && chmod 0755 /run/munge
    if [ ! -s /etc/munge/munge.key ]; then      # the Debian postinst normally creates it
        mungekey --create --force --keyfile=/etc/munge/munge.key 2>/dev/null ||
            dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
        chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
    fi
    if [ -S /run/munge/munge.socket.2 ] && munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
        log "munged already running (not ours: it will not be stopped)"; return
    fi
    rm -f /run/munge/munged.pid
    ( spawn runuser -u munge -- /usr/sbin/munged </dev/null >/dev/null 2>&1 )   # daemonizes
    for _ in $(seq 50); do [ -s /run/munge/munged.pid ] && break; sleep 0.1; done
    cp /run/munge/munged.pid "$RUN/munged.ourpid"
    munge -n | unmunge >/dev/null
}

# node3's network: veth pair host 127.2.0.1/24 <-> namespace 127.2.0.2/24. 127/8 addresses off the
# loopback device are dropped as martians unless route_localnet=1 (on both ends).
netns_up() {
    netns_down
    ip netns add "$NS"
    ip link add "$VETH_HOST" type veth peer name "$VETH_NS" netns "$NS"
    sysctl -qw "net.ipv4.conf.$VETH_HOST.route_localnet=1"
    ip addr add 127.2.0.1/24 dev "$VETH_HOST"
    ip link set "$VETH_HOST" up
    ip -n "$NS" link set lo up
    nsenter --net="/run/netns/$NS" sysctl -qw net.ipv4.conf.all.route_localnet=1 \
        "net.ipv4.conf.$VETH_NS.route_localnet=1"
    ip -n "$NS" addr add 127.2.0.2/24 dev "$VETH_NS"
    ip -n "$NS" link set "$VETH_NS" up
}

# Deleting a namespace frees its end of the veth pair later, in the kernel's own time: delete the
# pair from the host's end, and wait until it is gone, so that a start right after a stop works.
netns_down() {
    ip netns del "$NS" 2>/dev/null || true
    ip link del "$VETH_HOST" 2>/dev/null || true
    for _ in $(seq 50); do ip link show "$VETH_HOST" >/dev/null 2>&1 || return 0; sleep 0.1; done
}

start_slurmd() {            # $1 = node name
    local n=$1 pid
    [[ " $NODES " == *" $n "* ]] || { echo "unknown node: $n" >&2; exit 2; }
    pid=$(ourpid "slurmd-$n")
    if alive "$pid"; then log "slurmd $n already running, pid $pid"; return; fi
    mkdir -p "$BASE/spool/$n"
    # -D foreground (so $! is the daemon's PID), -N = which NodeName this slurmd is
    if [ "$n" = node3 ]; then
        # nsenter --net, NOT "ip netns exec": that remounts /sys, hiding /sys/fs/cgroup from slurmd
        # ("No filesystem mounted on /sys/fs/cgroup ... slurmd initialization failed" on 22.05)
        spawn nsenter --net="/run/netns/$NS" slurmd -D -N "$n" >>"$BASE/log/slurmd-$n.stdout" 2>&1 </dev/null &
    else
        spawn slurmd -D -N "$n" >>"$BASE/log/slurmd-$n.stdout" 2>&1 </dev/null &
    fi
    echo $! >"$RUN/slurmd-$n.ourpid"
    log "slurmd $n started, pid $!"
}

# nodes idle and responding (sinfo %t has a '*' when not responding; idle also covers IDLE+PLANNED)
idle_nodes() { sinfo -h -N -t idle -o '%N %t' 2>/dev/null | grep -v '\*' | cut -d' ' -f1 | sort -u | xargs; }

do_start() {
    [ "$(id -u)" = 0 ] || { echo "testbed.sh start must run as root" >&2; exit 1; }
    local f want
    for f in "$RUN"/slurm*.ourpid; do
        if [ -e "$f" ] && alive "$(cat "$f")"; then log "a previous cluster still runs: stopping it"; do_stop; break; fi
    done
    rm -rf "$BASE/state" "$BASE/spool" "$BASE/log" "$BASE/etc" "$RUN"
    mkdir -p "$BASE"/{etc,state,spool,run,log,fakedev}
    cp "$HERE/slurm.conf" "$HERE/gres.conf" "$BASE/etc/"
    write_cgroup_conf
    # fake GPU referenced by gres.conf; a regular file also works, with a warning in slurmd's log
    [ -e "$BASE/fakedev/nvidia0" ] || mknod -m 666 "$BASE/fakedev/nvidia0" c 1 3 || touch "$BASE/fakedev/nvidia0"
    netns_up
    start_munge
    # -c: ignore any saved state (a clean cluster every time)
    spawn slurmctld -D -c >>"$BASE/log/slurmctld.stdout" 2>&1 </dev/null &
    echo $! >"$RUN/slurmctld.ourpid"
    for _ in $(seq 100); do
        alive "$(ourpid slurmctld)" || { tail "$BASE/log/slurmctld.stdout" "$BASE/log/slurmctld.log" >&2; exit 1; }
        scontrol ping 2>/dev/null | grep -q 'is UP' && break
        sleep 0.1
    done
    scontrol ping | grep -q 'is UP' || { echo "slurmctld does not answer, see $BASE/log" >&2; exit 1; }
    for n in $NODES; do start_slurmd "$n"; done
    want=$(echo $NODES)
    for _ in $(seq 300); do [ "$(idle_nodes)" = "$want" ] && break; sleep 0.1; done
    if [ "$(idle_nodes)" != "$want" ]; then
        sinfo -N -o '%N %P %t %G %E' >&2
        echo "nodes not idle after 30 s (idle: $(idle_nodes)), see $BASE/log" >&2; exit 1
    fi
    log "cluster up: $want idle"
}

# PIDs belonging to one fake node: its slurmd, every slurmstepd that holds that node's log file
# open (slurmstepd re-titles itself "slurmstepd: [JOB.STEP]" and leaves slurmd's process tree, but
# keeps SlurmdLogFile=slurmd-%n.log open), and all descendants of those (the job's processes).
pids_of_node() {
    python3 - "$1" "$BASE" <<'PY'
import os, sys
node, base = sys.argv[1], sys.argv[2]
logf = os.path.join(base, "log", f"slurmd-{node}.log")
roots = set()
try:
    roots.add(int(open(os.path.join(base, "run", f"slurmd-{node}.ourpid")).read()))
except (OSError, ValueError):
    pass
children = {}
for p in os.listdir("/proc"):
    if not p.isdigit():
        continue
    try:
        ppid = int(open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(p))
        if open(f"/proc/{p}/cmdline", "rb").read().startswith(b"slurmstepd"):
            for fd in os.listdir(f"/proc/{p}/fd"):
                try:
                    if os.readlink(f"/proc/{p}/fd/{fd}") == logf:
                        roots.add(int(p))
                        break
                except OSError:
                    pass
    except (OSError, IndexError, ValueError):
        pass
out, todo = set(), [r for r in roots if os.path.exists(f"/proc/{r}")]
while todo:
    p = todo.pop()
    if p not in out:
        out.add(p)
        todo.extend(children.get(p, []))
print(" ".join(map(str, sorted(out))))
PY
}

kill_node() {
    local pids; pids=$(pids_of_node "$1")
    rm -f "$RUN/slurmd-$1.ourpid"
    [ -n "$pids" ] || { log "no processes for $1"; return 0; }
    log "kill -KILL $1: $pids"
    kill -KILL $pids 2>/dev/null || true
}

stop_pid() {     # $1 = pidfile name; TERM, wait up to 15 s, then KILL
    local p; p=$(ourpid "$1")
    if alive "$p"; then
        kill -TERM "$p" 2>/dev/null || true
        for _ in $(seq 150); do alive "$p" || break; sleep 0.1; done
        alive "$p" && kill -KILL "$p" 2>/dev/null || true
    fi
    rm -f "$RUN/$1.ourpid"
}

# No job cancelling or waiting: start wipes all state anyway, so the nodes (slurmd and every job
# process) are simply killed.
do_stop() {
    local n
    for n in $NODES; do kill_node "$n"; done
    stop_pid slurmctld
    stop_pid munged
    netns_down
    log "stopped"
}

case "${1:-}" in
    install)      do_install ;;
    start)        do_start ;;
    stop)         do_stop ;;
    status)       sinfo -N -o '%N %P %t %G %f %E'; squeue ;;
    kill-node)    kill_node "$2" ;;
    start-node)   start_slurmd "$2" ;;
    revive)       ip link set "$VETH_HOST" up; for n in $NODES; do start_slurmd "$n"; done ;;
    cut-node3)    ip link set "$VETH_HOST" down ;;
    uncut-node3)  ip link set "$VETH_HOST" up ;;
    pids-of-node) pids_of_node "$2" ;;
    *) sed -n '2,20p' "$0"; exit 2 ;;
esac
