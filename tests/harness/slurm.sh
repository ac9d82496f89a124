#!/usr/bin/env bash
# A real Slurm cluster for nodus's tests, on this one machine: munged,
# MariaDB + slurmdbd (accounting, so sacct answers), slurmctld, and two
# slurmd nodes with different GPU models on stand-in device files, each node
# in its own network and UTS namespace. See tests/harness/README.md.
#
#   bash tests/harness/slurm.sh up      # install when missing, start it all (idempotent)
#   bash tests/harness/slurm.sh down    # stop it all, remove its namespaces and state
#
# Progress goes to stderr; `up` prints only what a client needs (SLURM_CONF=...) on
# stdout. Everything lives under .ci/state/slurm/; daemons are stopped by their
# pid files. The Docker engine and the Swarm are never touched.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
STATE="$REPO/.ci/state/slurm"
CONF="$STATE/etc/slurm.conf"
DBD_CONF="$STATE/etc/slurmdbd.conf"
MUNGE_DIR="$STATE/munge"
MUNGE_SOCK="$MUNGE_DIR/munge.socket"
MUNGE_PID="$MUNGE_DIR/munged.pid"
DB_DIR="$STATE/mariadb"
DB_SOCK="$DB_DIR/mariadb.sock"
DB_PID="$DB_DIR/mariadbd.pid"
DB_PORT=13306
DB_USER=slurm
DB_PASS=nodus-test
CTLD_PORT=16817
SLURMD_PORT=16818
DBD_PORT=16819
CTLD_PID="$STATE/slurmctld.pid"
DBD_PID="$STATE/slurmdbd.pid"
CLUSTER=nodus
ACCOUNT=nodus-test
URGENT_QOS=urgent
PARTITION=gpu

# node name, GRES type, host end of its veth, address of the host end, node address
NODES=(gpu-a gpu-b)
declare -A GPU_TYPE=([gpu-a]=h100 [gpu-b]=a100)
declare -A VETH=([gpu-a]=nslurm-ha [gpu-b]=nslurm-hb)
declare -A HOST_ADDR=([gpu-a]=10.214.1.1 [gpu-b]=10.214.2.1)
declare -A NODE_ADDR=([gpu-a]=10.214.1.2 [gpu-b]=10.214.2.2)
# first minor number of the node's stand-in /dev/nvidiaN character devices
declare -A MINOR0=([gpu-a]=0 [gpu-b]=2)
GPUS_PER_NODE=2
PREFIX=24
CTLD_ADDR=10.214.1.1

HARNESS=slurm.sh
# shellcheck source=tests/harness/common.sh
. "$HERE/common.sh"

netns_of() { echo "nodus-slurm-$1"; } # netns_of NODE
node_dir() { echo "$STATE/node/$1"; }
node_pid_file() { echo "$(node_dir "$1")/slurmd.pid"; }

ensure_packages() {
    local missing=()
    command -v munged >/dev/null 2>&1 || missing+=(munge)
    command -v slurmctld >/dev/null 2>&1 || missing+=(slurm-wlm)
    command -v slurmd >/dev/null 2>&1 || missing+=(slurm-wlm)
    command -v sbatch >/dev/null 2>&1 || missing+=(slurm-wlm)
    command -v slurmdbd >/dev/null 2>&1 || missing+=(slurmdbd)
    command -v mariadbd >/dev/null 2>&1 || missing+=(mariadb-server-core)
    command -v mariadb-install-db >/dev/null 2>&1 || missing+=(mariadb-server-core)
    # my_print_defaults: mariadb-install-db needs it
    command -v my_print_defaults >/dev/null 2>&1 || missing+=(mariadb-client-core)
    command -v ip >/dev/null 2>&1 || missing+=(iproute2)
    command -v nsenter >/dev/null 2>&1 || missing+=(util-linux)
    [ "${#missing[@]}" -eq 0 ] && return 0
    mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # The packages' scripts would start munged, slurmctld and slurmd from /etc, out of
    # reach of `down`: deny that (as Docker's Debian images do) for the install only.
    local policy=/usr/sbin/policy-rc.d made_policy=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\n# tests/harness/slurm.sh: no daemon starts while it installs\nexit 101\n' >"$policy"
        chmod 755 "$policy"
        made_policy=1
    fi
    local rc=0
    if ! apt-get install -y --no-install-recommends "${missing[@]}" >&2; then
        apt-get update >&2 || true
        apt-get install -y --no-install-recommends "${missing[@]}" >&2 || rc=$?
    fi
    [ "$made_policy" -eq 0 ] || rm -f "$policy"
    [ "$rc" -eq 0 ] || die "apt-get install ${missing[*]} failed (exit $rc)"
}


pid_from() { # pid_from FILE: the live pid in FILE, or fail
    local pid
    [ -s "$1" ] || return 1
    pid="$(tr -dc '0-9' <"$1")"
    [ -n "$pid" ] && alive "$pid" && echo "$pid"
}

die_log() { # die_log LOG MESSAGE: the log's tail, then the message (down removes the log)
    tail -n 20 "$1" >&2 2>/dev/null || true
    die "$2"
}

slurm_env() { env SLURM_CONF="$CONF" "$@"; }

# ------------------------------------------------------------------ config ----

write_config() {
    mkdir -p "$STATE/etc" "$STATE/ctld" "$STATE/log" "$MUNGE_DIR" "$DB_DIR"
    chmod 700 "$MUNGE_DIR"
    local node i
    for node in "${NODES[@]}"; do
        mkdir -p "$(node_dir "$node")/spool" "$(node_dir "$node")/dev"
        for ((i = 0; i < GPUS_PER_NODE; i++)); do
            local dev
            dev="$(node_dir "$node")/dev/nvidia$i"
            [ -c "$dev" ] || mknod "$dev" c 195 $((MINOR0[$node] + i))
        done
    done
    {
        cat <<EOF
# Written by tests/harness/slurm.sh; removed by its down.
ClusterName=$CLUSTER
SlurmctldHost=$(hostname -s)($CTLD_ADDR)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCK
CredType=cred/munge
StateSaveLocation=$STATE/ctld
SlurmctldPidFile=$CTLD_PID
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdSpoolDir=$STATE/node/%n/spool
SlurmdPidFile=$STATE/node/%n/slurmd.pid
SlurmdLogFile=$STATE/node/%n/slurmd.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1
ReturnToService=2
SlurmdTimeout=30
InactiveLimit=0
KillWait=2
MinJobAge=300
# Small, so that the tests can submit a fan-out larger than one array (nodus splits it).
MaxArraySize=10
# A job of QOS $URGENT_QOS preempts a job of QOS normal (every job's default) and Slurm
# puts the preempted job back in its queue, as a cluster with preemption does.
PreemptType=preempt/qos
PreemptMode=REQUEUE
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD_PORT
# the munge socket for talking to slurmdbd (AuthInfo does not cover that)
AccountingStoragePass=$MUNGE_SOCK
AccountingStorageTRES=gres/gpu,gres/gpu:h100,gres/gpu:a100
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
EOF
        for node in "${NODES[@]}"; do
            echo "NodeName=$node NodeHostname=$node NodeAddr=${NODE_ADDR[$node]} CPUs=2 RealMemory=1000 Gres=gpu:${GPU_TYPE[$node]}:$GPUS_PER_NODE State=UNKNOWN"
        done
        echo "PartitionName=$PARTITION Nodes=$(
            IFS=,
            echo "${NODES[*]}"
        ) Default=YES MaxTime=INFINITE State=UP"
    } >"$CONF.new"
    mv "$CONF.new" "$CONF"
    {
        for node in "${NODES[@]}"; do
            echo "NodeName=$node Name=gpu Type=${GPU_TYPE[$node]} File=$(node_dir "$node")/dev/nvidia[0-$((GPUS_PER_NODE - 1))]"
        done
    } >"$STATE/etc/gres.conf"
    # slurmdbd refuses a config readable by others.
    (
        umask 077
        cat >"$DBD_CONF" <<EOF
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCK
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
PidFile=$DBD_PID
LogFile=$STATE/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=$DB_USER
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
EOF
    )
    chmod 600 "$DBD_CONF"
}

# ------------------------------------------------------------------ daemons ----

munge_answers() { [ -S "$MUNGE_SOCK" ] && munge -S "$MUNGE_SOCK" -n </dev/null | unmunge -S "$MUNGE_SOCK" >/dev/null 2>&1; }

start_munge() {
    pid_from "$MUNGE_PID" >/dev/null && munge_answers && return 0
    if [ ! -s "$MUNGE_DIR/munge.key" ]; then
        (
            umask 077
            dd if=/dev/urandom of="$MUNGE_DIR/munge.key" bs=1 count=1024 2>/dev/null
        )
    fi
    log "starting munged (socket $MUNGE_SOCK)"
    # --force: munged otherwise refuses folders of this checkout that others may read.
    munged --force --key-file="$MUNGE_DIR/munge.key" --socket="$MUNGE_SOCK" \
        --pid-file="$MUNGE_PID" --log-file="$STATE/log/munged.log" \
        --seed-file="$MUNGE_DIR/munge.seed" </dev/null >&2
    wait_for 15 munged munge_answers || die_log "$STATE/log/munged.log" "munged does not answer (log above)"
}

db_answers() { pid_from "$DB_PID" >/dev/null && (exec 3<>"/dev/tcp/127.0.0.1/$DB_PORT") 2>/dev/null; }

start_mariadb() {
    pid_from "$DB_PID" >/dev/null && return 0
    if [ ! -d "$DB_DIR/data/mysql" ]; then
        log "mariadb-install-db into $DB_DIR/data"
        mariadb-install-db --no-defaults --user=root --datadir="$DB_DIR/data" \
            --auth-root-authentication-method=socket --skip-test-db \
            >"$STATE/log/mariadb-install-db.log" 2>&1 ||
            die_log "$STATE/log/mariadb-install-db.log" "mariadb-install-db failed (log above)"
    fi
    # Run at every start: the account slurmdbd logs in with (over TCP on 127.0.0.1).
    cat >"$DB_DIR/init.sql" <<EOF
CREATE USER IF NOT EXISTS '$DB_USER'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
GRANT ALL ON *.* TO '$DB_USER'@'127.0.0.1';
EOF
    log "starting mariadbd on 127.0.0.1:$DB_PORT (log: $STATE/log/mariadbd.log)"
    setsid mariadbd --no-defaults --user=root --datadir="$DB_DIR/data" \
        --socket="$DB_SOCK" --pid-file="$DB_PID" --bind-address=127.0.0.1 \
        --port="$DB_PORT" --init-file="$DB_DIR/init.sql" \
        --log-error="$STATE/log/mariadbd.log" --skip-log-bin \
        --innodb-buffer-pool-size=32M --innodb-log-file-size=16M \
        </dev/null >/dev/null 2>&1 &
    wait_for 60 "mariadbd on 127.0.0.1:$DB_PORT" db_answers ||
        die_log "$STATE/log/mariadbd.log" "mariadbd did not start (log above)"
}

dbd_answers() { slurm_env sacctmgr -n list cluster >/dev/null 2>&1; }

start_slurmdbd() {
    if ! pid_from "$DBD_PID" >/dev/null; then
        log "starting slurmdbd on 127.0.0.1:$DBD_PORT (log: $STATE/log/slurmdbd.log)"
        SLURM_CONF="$CONF" slurmdbd </dev/null >&2
    fi
    wait_for 20 "slurmdbd to answer" dbd_answers ||
        die_log "$STATE/log/slurmdbd.log" "slurmdbd does not answer (log above)"
}

ensure_accounting() { # the cluster, an account and root in it, so sacct answers as on a cluster
    local out
    if [ -z "$(slurm_env sacctmgr -n -P list cluster "$CLUSTER" format=cluster)" ]; then
        out="$(slurm_env sacctmgr -i add cluster "$CLUSTER" 2>&1)" || die "sacctmgr add cluster: $out"
    fi
    if [ -z "$(slurm_env sacctmgr -n -P list account "$ACCOUNT" format=account)" ]; then
        out="$(slurm_env sacctmgr -i add account "$ACCOUNT" cluster="$CLUSTER" \
            description="nodus tests" organization=nodus 2>&1)" || die "sacctmgr add account: $out"
    fi
    if [ -z "$(slurm_env sacctmgr -n -P list assoc user=root account="$ACCOUNT" format=user)" ]; then
        out="$(slurm_env sacctmgr -i add user root account="$ACCOUNT" \
            defaultaccount="$ACCOUNT" cluster="$CLUSTER" 2>&1)" || die "sacctmgr add user: $out"
    fi
    # A QOS that preempts the default one (normal), requeueing what it preempts.
    if [ -z "$(slurm_env sacctmgr -n -P list qos "$URGENT_QOS" format=name)" ]; then
        out="$(slurm_env sacctmgr -i add qos "$URGENT_QOS" priority=1000 preempt=normal \
            preemptmode=requeue 2>&1)" || die "sacctmgr add qos: $out"
    fi
    if ! slurm_env sacctmgr -n -P list assoc user=root format=qos | grep -qw "$URGENT_QOS"; then
        out="$(slurm_env sacctmgr -i modify user root set qos+="$URGENT_QOS" 2>&1)" ||
            die "sacctmgr modify user: $out"
    fi
}

ctld_answers() { slurm_env scontrol ping 2>/dev/null | grep -q 'is UP'; }

start_slurmctld() {
    if ! pid_from "$CTLD_PID" >/dev/null; then
        log "starting slurmctld on $CTLD_ADDR:$CTLD_PORT (log: $STATE/log/slurmctld.log)"
        slurmctld -f "$CONF" </dev/null >&2
    fi
    wait_for 30 "slurmctld to answer" ctld_answers ||
        die_log "$STATE/log/slurmctld.log" "slurmctld does not answer (log above)"
}

netns_up() { # netns_up NODE: a namespace with a veth pair to the host
    local node="$1" ns veth peer
    ns="$(netns_of "$node")"
    veth="${VETH[$node]}"
    peer="${veth/nslurm-h/nslurm-n}"
    [ -e "/var/run/netns/$ns" ] || ip netns add "$ns"
    if ! ip link show "$veth" >/dev/null 2>&1; then
        ip -n "$ns" link del "$peer" 2>/dev/null || true
        ip link add "$veth" type veth peer name "$peer"
        ip link set "$peer" netns "$ns"
        ip addr add "${HOST_ADDR[$node]}/$PREFIX" dev "$veth"
        ip link set "$veth" up
        ip -n "$ns" addr add "${NODE_ADDR[$node]}/$PREFIX" dev "$peer"
        ip -n "$ns" link set "$peer" up
        ip -n "$ns" link set lo up
        ip -n "$ns" route add default via "${HOST_ADDR[$node]}"
    fi
}

start_slurmd() { # start_slurmd NODE
    local node="$1" ns
    pid_from "$(node_pid_file "$node")" >/dev/null && return 0
    ns="$(netns_of "$node")"
    log "starting slurmd $node (${GPU_TYPE[$node]} x$GPUS_PER_NODE) in netns $ns at ${NODE_ADDR[$node]}"
    # nsenter --net only (`ip netns exec` would remount /sys); unshare --uts gives the
    # node its own host name. slurmd daemonizes inside both namespaces.
    # shellcheck disable=SC2016
    nsenter --net="/var/run/netns/$ns" unshare --uts -- sh -c \
        'hostname "$0" && exec slurmd -f "$1" -N "$0"' "$node" "$CONF" </dev/null >&2
}

nodes_idle() {
    local out
    out="$(slurm_env sinfo -h -N -o '%N %t' 2>/dev/null)" || return 1
    local node
    for node in "${NODES[@]}"; do
        printf '%s\n' "$out" | grep -qx "$node idle" || return 1
    done
}

cmd_up() {
    [ "$(id -u)" -eq 0 ] || die "must run as root (network namespaces, mknod, daemons)"
    # Half a cluster is worse than none: undo everything when any step below fails.
    UP_DONE=0
    # (NODUS_SLURM_KEEP=1 leaves it as it is, to read its logs under $STATE.)
    if [ "${NODUS_SLURM_KEEP:-}" != 1 ]; then
        trap 'if [ "$UP_DONE" -eq 0 ]; then log "up failed half-way: undoing it"; cmd_down || true; fi' EXIT
    fi
    ensure_packages
    write_config
    start_munge
    start_mariadb
    start_slurmdbd
    ensure_accounting
    local node
    for node in "${NODES[@]}"; do
        netns_up "$node"
    done
    start_slurmctld
    for node in "${NODES[@]}"; do
        start_slurmd "$node"
    done
    if ! wait_for 60 "both nodes to be idle" nodes_idle; then
        slurm_env sinfo -N -o '%N %t %G %E' >&2 || true
        die "nodes not idle (logs: $STATE/node/*/slurmd.log, $STATE/log/slurmctld.log)"
    fi
    log "slurm ready: $(slurm_env sinfo -h -N -o '%N:%G' | tr '\n' ' ')(partition $PARTITION, account $ACCOUNT)"
    UP_DONE=1
    trap - EXIT
    echo "SLURM_CONF=$CONF"
}

# -------------------------------------------------------------------- down ----

stop_pid_file() { # stop_pid_file NAME FILE: TERM, then KILL after 30 s
    local name="$1" file="$2" pid
    pid="$(pid_from "$file")" || return 0
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    if ! wait_for 30 "$name to exit" not_alive "$pid"; then
        kill -KILL "$pid" 2>/dev/null || true
        wait_for 10 "$name to die" not_alive "$pid" || true
    fi
    STOPPED+=("$pid")
}

all_reaped() { # all_reaped PID...: none is in /proc, not even as <defunct>
    local pid
    for pid in "$@"; do
        [ ! -e "/proc/$pid" ] || return 1
    done
}

cmd_down() {
    [ "$(id -u)" -eq 0 ] || die "must run as root (network namespaces, mknod, daemons)"
    local node ns pid
    STOPPED=()
    if [ -f "$CONF" ] && pid_from "$CTLD_PID" >/dev/null; then
        # Jobs first, so that no slurmstepd outlives its slurmd.
        slurm_env scancel --full --partition="$PARTITION" >/dev/null 2>&1 || true
    fi
    for node in "${NODES[@]}"; do
        stop_pid_file "slurmd $node" "$(node_pid_file "$node")"
    done
    stop_pid_file slurmctld "$CTLD_PID"
    stop_pid_file slurmdbd "$DBD_PID"
    stop_pid_file mariadbd "$DB_PID"
    stop_pid_file munged "$MUNGE_PID"
    # Whatever else still runs in a node's namespace (a job's slurmstepd and its
    # processes, e.g. after a slurmd that was killed hard).
    for node in "${NODES[@]}"; do
        ns="$(netns_of "$node")"
        [ -e "/var/run/netns/$ns" ] || continue
        for pid in $(ip netns pids "$ns" 2>/dev/null); do
            log "killing leftover process $pid in $ns: $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)"
            kill -KILL "$pid" 2>/dev/null || true
            wait_for 10 "process $pid to die" not_alive "$pid" || true
        done
    done
    for node in "${NODES[@]}"; do
        ns="$(netns_of "$node")"
        if ip link show "${VETH[$node]}" >/dev/null 2>&1; then
            ip link del "${VETH[$node]}"
        fi
        if [ -e "/var/run/netns/$ns" ] || ip netns list 2>/dev/null | grep -qw "$ns"; then
            ip netns del "$ns"
        fi
    done
    # A daemon's parent is init; give init a moment to reap them, so no <defunct>
    # entry lingers in `pgrep -a` (best effort).
    if [ "${#STOPPED[@]}" -gt 0 ]; then
        wait_for 10 "init to reap ${STOPPED[*]}" all_reaped "${STOPPED[@]}" || true
    fi
    rm -rf --one-file-system "$STATE"
    log "slurm down"
}

usage() {
    sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

case "${1:-}" in
    up) cmd_up ;;
    down) cmd_down ;;
    *) usage ;;
esac
