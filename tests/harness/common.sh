# What every test harness script shares; sourced by engine.sh and slurm.sh after they
# set HARNESS (their own name, for the messages). Progress and errors go to stderr.

log() { printf '%s: %s\n' "$HARNESS" "$*" >&2; }
die() {
    printf '%s: error: %s\n' "$HARNESS" "$*" >&2
    exit 1
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

alive() { # alive PID: a live process, not a zombie
    local st
    st="$(sed -n 's/.*) \(.\).*/\1/p' 2>/dev/null <"/proc/$1/stat" || true)"
    [ -n "$st" ] && [ "$st" != "Z" ]
}

not_alive() { ! alive "$1"; }
