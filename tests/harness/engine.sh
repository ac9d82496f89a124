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
# A real CPython on the busybox root (see add_python).
PY_IMAGE="nodus-test/python:3.11"
PY_BIN="/usr/bin/python3.11"
PY_STDLIB="/usr/lib/python3.11"
# "Another Python version" (see build_other_python_image): always tagged
# $PY_OTHER_IMAGE, and nodus-test/python:3.X after the version it reports.
PY_OTHER_IMAGE="nodus-test/python:other"
PY_OTHER_MINORS="3.10 3.12 3.9 3.13"
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

HARNESS=engine.sh
# shellcheck source=tests/harness/common.sh
. "$HERE/common.sh"

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
    [ -x "$PY_BIN" ] || missing+=(python3.11)
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

write_main_config() {
    mkdir -p "$STATE"
    cat >"$STATE/daemon.json" <<'EOF'
{
  "node-generic-resources": ["NVIDIA-GPU=GPU-fake-0", "NVIDIA-GPU=GPU-fake-1"]
}
EOF
}

busybox_root() { # busybox_root DIR: the root file system of $IMAGE
    local root="$1" applet
    mkdir -p "$root/bin" "$root/etc" "$root/tmp" "$root/root"
    chmod 1777 "$root/tmp"
    cp /bin/busybox "$root/bin/busybox"
    for applet in $APPLETS; do
        ln -s busybox "$root/bin/$applet"
    done
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' \
        >"$root/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
}

copy_libs() { # copy_libs ROOT ELF...: the shared libraries ldd names, at their own paths
    local root="$1" out lib
    shift
    out="$(ldd "$@" 2>&1)" || die "ldd failed: $out"
    if printf '%s\n' "$out" | grep -q 'not found'; then
        die "missing shared libraries: $(printf '%s\n' "$out" | grep 'not found' | sort -u | tr -s '\t\n' '  ')"
    fi
    # "name => /path (addr)" lines, and the loader's own "/lib64/ld-linux-x86-64.so.2 (addr)"
    for lib in $(printf '%s\n' "$out" |
        awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// && $2 ~ /^\(/ {print $1}' | sort -u); do
        [ -e "$root$lib" ] && continue
        mkdir -p "$root$(dirname "$lib")"
        cp -L "$lib" "$root$lib" # the file itself, not a (merged-/usr) symlink to it
    done
}

# add_python ROOT BIN STDLIB: a CPython interpreter, its standard library
# (less the test suite, GUI, ensurepip, byte code, static libpython and
# third-party site-packages) and every shared library that it and
# lib-dynload/*.so load, each at its host path (the interpreter then finds
# its prefix, and its RUNPATH its libpython, as on the host).
add_python() {
    local root="$1" bin="$2" stdlib="$3" name
    name="$(basename "$stdlib")"
    mkdir -p "$root$(dirname "$bin")" "$root$(dirname "$stdlib")"
    cp "$bin" "$root$bin"
    tar -C "$(dirname "$stdlib")" -c \
        --exclude="$name/test" --exclude="$name/idlelib" --exclude="$name/tkinter" \
        --exclude="$name/turtledemo" --exclude="$name/turtle.py" \
        --exclude="$name/ensurepip" --exclude="$name/lib2to3/tests" \
        --exclude="$name/unittest/test" --exclude="$name/ctypes/test" \
        --exclude="$name/sqlite3/test" --exclude="$name/distutils/tests" \
        --exclude="$name/lib-dynload/_tkinter*" --exclude="$name/lib-dynload/_test*" \
        --exclude="$name/lib-dynload/xxlimited*" --exclude="$name/config-*/*.a" \
        --exclude="$name/site-packages/*" --exclude="$name/dist-packages/*" \
        --exclude=__pycache__ "$name" | tar -C "$root$(dirname "$stdlib")" -x
    # Drop symlinks that would dangle in the image (Debian's sitecustomize.py
    # -> /etc/python3.11/, config-*/libpython*.so -> the shared libpython).
    local link target
    while IFS= read -r link; do
        target="$(readlink "$link")"
        case "$target" in
            /*) [ -e "$root$target" ] || rm -f "$link" ;;
            *) [ -e "$link" ] || rm -f "$link" ;;
        esac
    done < <(find "$root$stdlib" -type l)
    copy_libs "$root" "$bin" "$root$stdlib"/lib-dynload/*.so
    # glibc dlopen()s libgcc_s for pthread_exit/pthread_cancel; ldd never names it.
    local gcc_s=/lib/x86_64-linux-gnu/libgcc_s.so.1
    if [ -e "$gcc_s" ] && [ ! -e "$root$gcc_s" ]; then
        mkdir -p "$root$(dirname "$gcc_s")"
        cp -L "$gcc_s" "$root$gcc_s"
    fi
}

import_python_root() { # import_python_root ROOT TAG DESCRIPTION KIND
    tar -C "$1" -c . | dk import \
        --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
        --change 'CMD ["python3"]' \
        --change "LABEL org.opencontainers.image.description=$3" \
        --change "LABEL nodus.test.python=$4" \
        - "$2" >/dev/null
}

build_python_image() { # build_python_image SCRATCH_DIR
    local root="$1/root"
    dk image inspect "$PY_IMAGE" >/dev/null 2>&1 && return 0
    [ -x "$PY_BIN" ] && [ -d "$PY_STDLIB" ] ||
        die "$PY_IMAGE needs Debian's $PY_BIN and $PY_STDLIB (apt-get install python3.11)"
    log "building $PY_IMAGE from $PY_BIN"
    busybox_root "$root"
    add_python "$root" "$PY_BIN" "$PY_STDLIB"
    ln -s python3.11 "$root/usr/bin/python3"
    ln -s python3.11 "$root/usr/bin/python"
    import_python_root "$root" "$PY_IMAGE" nodus-test-python-3.11 real
}

# "Another Python version", for version-mismatch tests. Debian 12 packages
# no second CPython (apt-cache policy python3.9 python3.10 python3.12
# python3.13: no candidate), so this prefers a real one built by pyenv
# (${PYENV_ROOT:-/root/.pyenv}/versions/3.X.Y: a shared-libpython build whose
# RUNPATH points into its own prefix, copied at that same path), first of
# $PY_OTHER_MINORS. Only when there is none does it build a stand-in: a
# busybox sh script named python3 that reports Python 3.9.18 to --version,
# -V and -c and refuses anything else (exit 2) - enough for a caller's
# version probe, not for running a bootstrap script. Either way the image is
# $PY_OTHER_IMAGE and nodus-test/python:3.X, labelled nodus.test.python=real
# or nodus.test.python=stand-in.
other_python() { # prints "PREFIX MINOR" of the first pyenv CPython found
    local root="${PYENV_ROOT:-/root/.pyenv}/versions" minor d
    for minor in $PY_OTHER_MINORS; do
        for d in $(find "$root" -mindepth 1 -maxdepth 1 -name "$minor.*" 2>/dev/null | sort -V -r); do
            case "${d##*/}" in *[!0-9.]*) continue ;; esac # 3.10.13, not 3.13t or 3.12-dev
            if [ -x "$d/bin/python$minor" ] && [ -f "$d/lib/python$minor/os.py" ]; then
                echo "$d $minor"
                return 0
            fi
        done
    done
    return 1
}

build_other_python_image() { # build_other_python_image SCRATCH_DIR
    local root="$1/root" found prefix minor tag
    dk image inspect "$PY_OTHER_IMAGE" >/dev/null 2>&1 && return 0
    busybox_root "$root"
    mkdir -p "$root/usr/bin"
    if found="$(other_python)"; then
        prefix="${found% *}"
        minor="${found#* }"
        tag="nodus-test/python:$minor"
        log "building $PY_OTHER_IMAGE ($tag) from $prefix"
        add_python "$root" "$prefix/bin/python$minor" "$prefix/lib/python$minor"
        ln -s "$prefix/bin/python$minor" "$root/usr/bin/python$minor"
        ln -s "python$minor" "$root/usr/bin/python3"
        ln -s "python$minor" "$root/usr/bin/python"
        import_python_root "$root" "$PY_OTHER_IMAGE" "nodus-test-python-$minor" real
    else
        minor=3.9
        tag="nodus-test/python:$minor"
        log "no second CPython (pyenv) here: $PY_OTHER_IMAGE ($tag) is a stand-in script"
        cat >"$root/usr/bin/python3" <<'STANDIN'
#!/bin/sh
# nodus-test stand-in for "another Python version": not a Python.
case "$1" in
    --version | -V) echo "Python 3.9.18" ;;
    -c) echo "(3, 9, 18)" ;;
    *)
        echo "python3: nodus-test stand-in (reports Python 3.9.18); cannot run: $*" >&2
        exit 2
        ;;
esac
STANDIN
        chmod 755 "$root/usr/bin/python3"
        ln -s python3 "$root/usr/bin/python"
        ln -s python3 "$root/usr/bin/python$minor"
        import_python_root "$root" "$PY_OTHER_IMAGE" "nodus-test-python-$minor-stand-in" stand-in
    fi
    dk tag "$PY_OTHER_IMAGE" "$tag"
}

test_image_tags() { # every tag of the test images on the main engine
    local img
    for img in "$IMAGE" "$CUDA_IMAGE" "$PY_IMAGE" "$PY_OTHER_IMAGE"; do
        echo "$img"
    done
    # the nodus-test/python:3.X tag(s) of $PY_OTHER_IMAGE
    dk image inspect "$PY_OTHER_IMAGE" --format '{{join .RepoTags "\n"}}' |
        grep -vxF -e "$PY_OTHER_IMAGE" -e "$PY_IMAGE" || true
}

build_images() {
    local tmp
    tmp="$(mktemp -d)"
    # shellcheck disable=SC2064
    trap "rm -rf '$tmp'; trap - RETURN" RETURN
    mkdir "$tmp/busybox" "$tmp/python" "$tmp/other"
    if ! dk image inspect "$IMAGE" >/dev/null 2>&1; then
        log "building $IMAGE from /bin/busybox"
        busybox_root "$tmp/busybox/root"
        tar -C "$tmp/busybox/root" -c . | dk import \
            --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
            --change 'CMD ["sh"]' \
            --change 'LABEL org.opencontainers.image.description=nodus-test-busybox' \
            - "$IMAGE" >/dev/null
    fi
    if ! dk image inspect "$CUDA_IMAGE" >/dev/null 2>&1; then
        dk tag "$IMAGE" "$CUDA_IMAGE"
    fi
    build_python_image "$tmp/python"
    build_other_python_image "$tmp/other"
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
    log "engine ready: $(dk version --format 'dockerd {{.Server.Version}} (API {{.Server.APIVersion}})'), images $(test_image_tags | xargs)"
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
    # Every test image, with all its tags (nodus-test/python:other is also
    # nodus-test/python:3.X); `docker save` of several tags shares the layers.
    local images=() img
    mapfile -t images < <(test_image_tags)
    for img in "${images[@]}"; do
        if ! dw1 image inspect "$img" >/dev/null 2>&1; then
            log "loading ${images[*]} into the worker engine"
            dk save "${images[@]}" | dw1 load >/dev/null
            break
        fi
    done
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
