#!/usr/bin/env bash
# Test engines for nodus: a local Docker engine with a fake NVIDIA device
# driver, and an optional two-node Docker Swarm on this one machine.
# See tests/harness/README.md for the design.
#
#   bash tests/harness/engine.sh up          # engine + test images (idempotent)
#   bash tests/harness/engine.sh down        # report what nodus left behind
#   bash tests/harness/engine.sh swarm-up    # two-node swarm; prints worker node id
#   bash tests/harness/engine.sh swarm-down  # tear the swarm down completely
#
# Progress goes to stderr; only results (the worker node id) go to stdout.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
STATE="$REPO/.ci/state"
HOOK_DIR="$REPO/tests/fakes/hook"

IMAGE="nodus-test/busybox:1"
CUDA_IMAGE="nodus-test/cuda:12.4.1-runtime"
APPLETS="sh echo cat env sleep ls cut grep head tail wc true false printf id kill
touch mkdir rm test [ date yes seq dd nproc df
awk sed tr sort uniq tee ps pwd hostname uname basename dirname timeout find
xargs chmod cp mv ln stat free whoami sha256sum md5sum base64 expr"

MAIN_SOCK="/var/run/docker.sock"
W1="$STATE/w1"
W1_SOCK="$W1/docker.sock"
W1_PID="$W1/docker.pid"
NS="nodus-w1"
NS_PATH="/var/run/netns/$NS"
VETH_HOST="nodus-h0"
VETH_NS="nodus-w0"
HOST_IP="10.213.0.1"
W1_IP="10.213.0.2"
PREFIX=24
W1_HOSTNAME="nodus-w1"

log() { printf 'engine.sh: %s\n' "$*" >&2; }
die() {
    printf 'engine.sh: error: %s\n' "$*" >&2
    exit 1
}

# Always talk to an explicit socket: a caller's DOCKER_HOST/DOCKER_CONTEXT must
# not redirect the harness to some other engine.
dk() { docker -H "unix://$MAIN_SOCK" "$@"; }
dw1() { docker -H "unix://$W1_SOCK" "$@"; }

main_answers() { dk info >/dev/null 2>&1; }
w1_answers() { [ -S "$W1_SOCK" ] && dw1 info >/dev/null 2>&1; }

ensure_packages() {
    local missing=()
    command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
    command -v docker >/dev/null 2>&1 || missing+=(docker.io)
    [ -x /bin/busybox ] || missing+=(busybox-static)
    command -v ip >/dev/null 2>&1 || missing+=(iproute2)
    command -v nsenter >/dev/null 2>&1 || missing+=(util-linux)
    [ "${#missing[@]}" -eq 0 ] && return 0
    # de-duplicate
    mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y "${missing[@]}" >&2; then
        apt-get update >&2
        apt-get install -y "${missing[@]}" >&2
    fi
}

wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...
    local secs="$1" what="$2"
    shift 2
    local deadline=$((SECONDS + secs))
    until "$@"; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            log "timed out after ${secs}s waiting for $what"
            return 1
        fi
        sleep 0.5
    done
}

write_main_config() {
    mkdir -p "$STATE"
    cat >"$STATE/daemon.json" <<'EOF'
{
  "node-generic-resources": ["NVIDIA-GPU=GPU-fake-0", "NVIDIA-GPU=GPU-fake-1"]
}
EOF
}

build_images() {
    if ! dk image inspect "$IMAGE" >/dev/null 2>&1; then
        log "building $IMAGE from /bin/busybox"
        local tmp
        tmp="$(mktemp -d)"
        # shellcheck disable=SC2064
        trap "rm -rf '$tmp'" RETURN
        mkdir -p "$tmp/root/bin" "$tmp/root/etc" "$tmp/root/tmp" "$tmp/root/root"
        chmod 1777 "$tmp/root/tmp"
        cp /bin/busybox "$tmp/root/bin/busybox"
        local applet
        for applet in $APPLETS; do
            ln -s busybox "$tmp/root/bin/$applet"
        done
        printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' \
            >"$tmp/root/etc/passwd"
        printf 'root:x:0:\nnogroup:x:65534:\n' >"$tmp/root/etc/group"
        tar -C "$tmp/root" -c . | dk import \
            --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
            --change 'CMD ["sh"]' \
            --change 'LABEL org.opencontainers.image.description=nodus-test-busybox' \
            - "$IMAGE" >/dev/null
    fi
    if ! dk image inspect "$CUDA_IMAGE" >/dev/null 2>&1; then
        dk tag "$IMAGE" "$CUDA_IMAGE"
    fi
}

cmd_up() {
    ensure_packages
    [ -x "$HOOK_DIR/nvidia-container-runtime-hook" ] ||
        die "$HOOK_DIR/nvidia-container-runtime-hook is missing or not executable"
    write_main_config
    local started=0
    if ! main_answers; then
        log "starting dockerd (log: $STATE/dockerd.log)"
        setsid env PATH="$HOOK_DIR:$PATH" dockerd --config-file "$STATE/daemon.json" \
            >"$STATE/dockerd.log" 2>&1 </dev/null &
        started=1
        if ! wait_for 30 "dockerd on $MAIN_SOCK" main_answers; then
            tail -n 30 "$STATE/dockerd.log" >&2 || true
            die "dockerd did not answer on $MAIN_SOCK within 30 s"
        fi
    fi
    build_images
    local err
    if ! err="$(dk run --rm --gpus 1 "$IMAGE" true 2>&1)"; then
        err="$(printf '%s\n' "$err" | grep -v -e '^$' -e "^Run 'docker run --help'" | head -n 3)"
        if [ "$started" -eq 1 ]; then
            die "dockerd started but 'docker run --gpus 1' fails: $err"
        fi
        cat >&2 <<EOF
engine.sh: error: the running dockerd ($MAIN_SOCK) has no usable nvidia device driver:
  $err
dockerd registers that driver only if an executable named
nvidia-container-runtime-hook is on dockerd's own PATH when it starts.
Restart dockerd with the stand-in hook first on its PATH, e.g.:
  kill \$(cat /var/run/docker.pid)   # then wait for it to exit
  setsid env PATH="$HOOK_DIR:\$PATH" dockerd --config-file "$STATE/daemon.json" \\
      > "$STATE/dockerd.log" 2>&1 &
or stop it and simply rerun: bash tests/harness/engine.sh up
EOF
        exit 1
    fi
    log "engine ready: $(dk version --format 'dockerd {{.Server.Version}} (API {{.Server.APIVersion}})'), images $IMAGE $CUDA_IMAGE"
}

cmd_down() {
    # dockerd is deliberately left running. Report anything nodus left behind.
    if ! main_answers; then
        log "no engine answers on $MAIN_SOCK"
        return 0
    fi
    local left
    left="$(
        {
            dk ps -a --filter label=nodus.run --format 'container {{.ID}} {{.Names}} {{.Status}}'
            if [ "$(dk info --format '{{.Swarm.ControlAvailable}}')" = "true" ]; then
                dk service ls --filter label=nodus.run --format 'service {{.ID}} {{.Name}}'
            fi
            dk network ls --filter label=nodus.run --format 'network {{.ID}} {{.Name}}'
            dk volume ls --filter label=nodus.run --format 'volume {{.Name}}'
        } 2>&1
    )"
    if [ -n "$left" ]; then
        log "left behind (label nodus.run):"
        printf '%s\n' "$left"
    else
        log "nothing labelled nodus.run is left; dockerd keeps running"
    fi
}

# ---------------------------------------------------------------- swarm ----

netns_up() {
    [ -e "$NS_PATH" ] || ip netns add "$NS"
    if ! ip link show "$VETH_HOST" >/dev/null 2>&1; then
        # A stale peer may survive inside the namespace; start clean.
        ip -n "$NS" link del "$VETH_NS" >/dev/null 2>&1 || true
        ip link add "$VETH_HOST" type veth peer name "$VETH_NS" netns "$NS"
    fi
    ip -4 addr show dev "$VETH_HOST" | grep -q "inet $HOST_IP/$PREFIX" ||
        ip addr add "$HOST_IP/$PREFIX" dev "$VETH_HOST"
    ip link set "$VETH_HOST" up
    ip -n "$NS" -4 addr show dev "$VETH_NS" | grep -q "inet $W1_IP/$PREFIX" ||
        ip -n "$NS" addr add "$W1_IP/$PREFIX" dev "$VETH_NS"
    ip -n "$NS" link set lo up
    ip -n "$NS" link set "$VETH_NS" up
}

cmdline_of() { tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline" || true; }

alive() { # a live (not zombie) process
    local st
    st="$(sed -n 's/.*) \(.\).*/\1/p' 2>/dev/null <"/proc/$1/stat" || true)"
    [ -n "$st" ] && [ "$st" != "Z" ]
}

not_alive() { ! alive "$1"; }

w1_pid() { # pid of the worker dockerd, from its pid file or its command line
    local pid=""
    if [ -s "$W1_PID" ]; then
        pid="$(cat "$W1_PID")"
        if alive "$pid" && cmdline_of "$pid" | grep -qF -- "unix://$W1_SOCK"; then
            echo "$pid"
            return 0
        fi
    fi
    # Fallback (pid file lost): the dockerd whose command line names our socket.
    local p
    for p in /proc/[0-9]*; do
        pid="${p#/proc/}"
        if cmdline_of "$pid" | grep -qF -- "unix://$W1_SOCK" &&
            cmdline_of "$pid" | grep -q '^dockerd ' && alive "$pid"; then
            echo "$pid"
            return 0
        fi
    done
    return 1
}

w1_start() {
    if w1_answers; then
        return 0
    fi
    local pid
    if pid="$(w1_pid)"; then
        log "worker dockerd (pid $pid) is running but not answering; waiting"
        wait_for 30 "worker dockerd" w1_answers && return 0
        die "worker dockerd (pid $pid) does not answer on $W1_SOCK; run swarm-down first"
    fi
    mkdir -p "$W1/root" "$W1/exec"
    rm -f "$W1_PID" "$W1_SOCK"
    cat >"$W1/daemon.json" <<'EOF'
{
  "node-generic-resources": [
    "NVIDIA-GPU=GPU-w1-0", "NVIDIA-GPU=GPU-w1-1", "NVIDIA-GPU=GPU-w1-2", "NVIDIA-GPU=GPU-w1-3"
  ]
}
EOF
    log "starting worker dockerd in netns $NS (log: $W1/dockerd.log)"
    # nsenter --net switches only the network namespace. `ip netns exec` would
    # also remount /sys, after which dockerd fails: "Devices cgroup isn't mounted".
    # unshare --uts gives the worker its own host name, so the two nodes are
    # told apart in `docker node ls` (and node.hostname constraints work).
    # Every step execs, so the pid started here is dockerd's own.
    # shellcheck disable=SC2016
    nsenter --net="$NS_PATH" unshare --uts -- sh -c \
        'hostname "$0" && p="$1" && shift && exec setsid env PATH="$p" "$@"' \
        "$W1_HOSTNAME" "$HOOK_DIR:$PATH" dockerd \
        --config-file "$W1/daemon.json" \
        --data-root "$W1/root" --exec-root "$W1/exec" \
        -H "unix://$W1_SOCK" --pidfile "$W1_PID" \
        --bridge none --iptables=false --ip-masq=false \
        >"$W1/dockerd.log" 2>&1 </dev/null &
    if ! wait_for 30 "worker dockerd on $W1_SOCK" w1_answers; then
        tail -n 30 "$W1/dockerd.log" >&2 || true
        die "worker dockerd did not answer on $W1_SOCK within 30 s"
    fi
}

manager_init() {
    local state ctl addr
    state="$(dk info --format '{{.Swarm.LocalNodeState}}')"
    ctl="$(dk info --format '{{.Swarm.ControlAvailable}}')"
    addr="$(dk info --format '{{.Swarm.NodeAddr}}')"
    if [ "$state" = "active" ] && [ "$ctl" = "true" ]; then
        [ "$addr" = "$HOST_IP" ] ||
            die "the main engine already manages a swarm advertised on $addr, not $HOST_IP; run swarm-down (or docker swarm leave --force) first"
        return 0
    fi
    if [ "$state" != "inactive" ]; then
        # pending/error/locked, or a worker of some other swarm
        die "the main engine's swarm state is '$state' (manager: $ctl); run swarm-down first"
    fi
    log "docker swarm init --advertise-addr $HOST_IP"
    dk swarm init --advertise-addr "$HOST_IP" >/dev/null
}

worker_join() {
    local wstate wid
    wstate="$(dw1 info --format '{{.Swarm.LocalNodeState}}')"
    wid="$(dw1 info --format '{{.Swarm.NodeID}}')"
    if [ "$wstate" = "active" ] && [ -n "$wid" ] &&
        dk node inspect "$wid" >/dev/null 2>&1; then
        return 0
    fi
    if [ "$wstate" != "inactive" ]; then
        log "worker is in state '$wstate' of another swarm; leaving it"
        dw1 swarm leave --force >/dev/null 2>&1 || true
    fi
    # Forget worker nodes from earlier runs that are gone for good.
    local id
    for id in $(dk node ls --filter role=worker --format '{{.ID}} {{.Status}}' |
        awk '$2 != "Ready" {print $1}'); do
        dk node rm --force "$id" >/dev/null 2>&1 || true
    done
    local token
    token="$(dk swarm join-token -q worker)"
    log "joining the worker (advertise $W1_IP)"
    dw1 swarm join --token "$token" --advertise-addr "$W1_IP" \
        --listen-addr "$W1_IP:2377" "$HOST_IP:2377" >/dev/null
}

set_labels() { # set_labels NODE key=value...
    local node="$1"
    shift
    local kv key want have args=()
    for kv in "$@"; do
        key="${kv%%=*}"
        want="${kv#*=}"
        have="$(dk node inspect "$node" --format "{{index .Spec.Labels \"$key\"}}")"
        [ "$have" = "$want" ] || args+=(--label-add "$kv")
    done
    if [ "${#args[@]}" -gt 0 ]; then
        dk node update "${args[@]}" "$node" >/dev/null
    fi
}

both_ready() {
    local mid="$1" wid="$2"
    [ "$(dk node inspect "$mid" --format '{{.Status.State}}' 2>/dev/null)" = "ready" ] &&
        [ "$(dk node inspect "$wid" --format '{{.Status.State}}' 2>/dev/null)" = "ready" ]
}

cmd_swarm_up() {
    # Half a swarm is worse than none: undo everything when any step below fails.
    SWARM_UP_DONE=0
    trap 'if [ "$SWARM_UP_DONE" -eq 0 ]; then log "swarm-up failed half-way: undoing it"; cmd_swarm_down || true; fi' EXIT
    cmd_up
    netns_up
    w1_start
    if ! dw1 image inspect "$IMAGE" >/dev/null 2>&1 ||
        ! dw1 image inspect "$CUDA_IMAGE" >/dev/null 2>&1; then
        log "loading $IMAGE and $CUDA_IMAGE into the worker engine"
        dk save "$IMAGE" "$CUDA_IMAGE" | dw1 load >/dev/null
    fi
    manager_init
    worker_join
    local mid wid
    mid="$(dk info --format '{{.Swarm.NodeID}}')"
    wid="$(dw1 info --format '{{.Swarm.NodeID}}')"
    [ -n "$wid" ] || die "the worker has no swarm node id after joining"
    wait_for 60 "both swarm nodes to be Ready" both_ready "$mid" "$wid" ||
        die "swarm nodes not Ready: $(dk node ls 2>&1)"
    set_labels "$mid" nodus.gpu=L4 nodus.gpu_memory_gb=24 nodus.price_per_hour=0.7
    set_labels "$wid" nodus.gpu=H100 nodus.gpu_memory_gb=80 nodus.price_per_hour=12.5
    if ! dk node inspect "$mid" --format '{{json .Description.Resources.GenericResources}}' |
        grep -q 'GPU-fake-'; then
        log "warning: the manager declares no NVIDIA-GPU generic resources (dockerd was not"
        log "started with $STATE/daemon.json); services reserving GPUs cannot run on it"
    fi
    log "swarm ready: manager $mid (L4), worker $wid (H100)"
    SWARM_UP_DONE=1
    trap - EXIT
    echo "$wid"
}

w1_mounts() { # mount points at or under $W1, deepest first
    findmnt -rn -o TARGET 2>/dev/null | awk -v d="$W1" '$0 == d || index($0, d "/") == 1' |
        sort -r
}

cmd_swarm_down() {
    if main_answers && [ "$(dk info --format '{{.Swarm.ControlAvailable}}')" = "true" ]; then
        local svcs
        svcs="$(dk service ls -q --filter label=nodus.run)"
        if [ -n "$svcs" ]; then
            log "removing services: $(echo "$svcs" | tr '\n' ' ')"
            # shellcheck disable=SC2086
            dk service rm $svcs >/dev/null || true
        fi
    fi
    if w1_answers && [ "$(dw1 info --format '{{.Swarm.LocalNodeState}}')" != "inactive" ]; then
        log "worker leaves the swarm"
        dw1 swarm leave --force >/dev/null || true
    fi
    if main_answers; then
        local state
        state="$(dk info --format '{{.Swarm.LocalNodeState}}')"
        if [ "$(dk info --format '{{.Swarm.ControlAvailable}}')" = "true" ]; then
            local id
            for id in $(dk node ls --format '{{.ID}} {{.Self}}' | awk '$2 != "true" {print $1}'); do
                log "docker node rm --force $id"
                dk node rm --force "$id" >/dev/null || true
            done
        fi
        if [ "$state" != "inactive" ]; then
            log "main engine leaves the swarm"
            dk swarm leave --force >/dev/null || true
        fi
        # created by swarm init; unused once the engine has left
        dk network rm docker_gwbridge >/dev/null 2>&1 || true
    fi

    local pid
    if pid="$(w1_pid)"; then
        log "stopping worker dockerd (pid $pid)"
        kill -TERM "$pid" 2>/dev/null || true
        if ! wait_for 30 "worker dockerd to exit" not_alive "$pid"; then
            kill -KILL "$pid" 2>/dev/null || true
            wait_for 10 "worker dockerd to die" not_alive "$pid" || true
        fi
        # Its parent is init now; give init a moment to reap it, so no
        # <defunct> dockerd lingers in `pgrep -a dockerd` (best effort).
        wait_for 10 "init to reap pid $pid" test ! -e "/proc/$pid" 2>/dev/null || true
    fi
    # Anything else still running from the worker's tree (its containerd and
    # shims, e.g. after the worker dockerd was killed hard).
    local p
    for p in /proc/[0-9]*; do
        p="${p#/proc/}"
        if cmdline_of "$p" | grep -qF -- "$W1/" && alive "$p"; then
            log "killing leftover worker process $p: $(cmdline_of "$p")"
            kill -KILL "$p" 2>/dev/null || true
            wait_for 10 "process $p to die" not_alive "$p" || true
        fi
    done

    if [ -d "$W1" ]; then
        local m
        for m in $(w1_mounts); do
            umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
        done
        if [ -n "$(w1_mounts)" ]; then
            umount -R -l "$W1" 2>/dev/null || true
        fi
        if [ -n "$(w1_mounts)" ]; then
            die "mounts remain under $W1: $(w1_mounts | tr '\n' ' ')"
        fi
        rm -rf --one-file-system "$W1"
    fi

    if ip link show "$VETH_HOST" >/dev/null 2>&1; then
        ip link del "$VETH_HOST"
    fi
    if [ -e "$NS_PATH" ] || ip netns list 2>/dev/null | grep -qw "$NS"; then
        ip netns del "$NS"
    fi
    log "swarm down"
}

usage() {
    sed -n '2,11p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

[ "$(id -u)" -eq 0 ] || die "must run as root (it manages dockerd, network namespaces and mounts)"

case "${1:-}" in
    up) cmd_up ;;
    down) cmd_down ;;
    swarm-up) cmd_swarm_up ;;
    swarm-down) cmd_swarm_down ;;
    *) usage ;;
esac
