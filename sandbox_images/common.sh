# Helpers shared by the sandbox_images/*.sh scripts (sourced, not run).
#
# Progress goes to stderr as "[script] message" lines so that stdout stays free for
# the one thing a script reports (an image tag), and every step says how long it took.

RUNNER_SCRIPT_NAME=${RUNNER_SCRIPT_NAME:-$(basename "$0" .sh)}

log() { printf '[%s] %s\n' "$RUNNER_SCRIPT_NAME" "$*" >&2; }
die() {
    local code=1
    if [[ $1 =~ ^[0-9]+$ ]]; then code=$1; shift; fi
    printf '[%s] ERROR: %s\n' "$RUNNER_SCRIPT_NAME" "$*" >&2
    exit "$code"
}

# Microseconds since the epoch (bash >= 5 has EPOCHREALTIME; fall back to date).
now_us() {
    if [[ -n ${EPOCHREALTIME:-} ]]; then
        local t=${EPOCHREALTIME/[.,]/}
        printf '%s\n' "$t"
    else
        printf '%s000000\n' "$(date +%s)"
    fi
}

# since START_US -> "12.3s"
since() {
    local d=$(( $(now_us) - $1 ))
    printf '%d.%01ds' $(( d / 1000000 )) $(( (d % 1000000) / 100000 ))
}

human_bytes() {
    awk -v b="$1" 'BEGIN { split("B KB MB GB TB", u); i = 1;
        while (b >= 1000 && i < 5) { b /= 1000; i++ } printf (i == 1 ? "%d %s" : "%.1f %s"), b, u[i] }'
}

is_root() { [[ $(id -u) -eq 0 ]]; }

# The runner's data directory, as runner/paths.py computes it.
runner_home() {
    if [[ -n ${RUNNER_HOME:-} ]]; then
        printf '%s\n' "$RUNNER_HOME"
    else
        printf '%s\n' "${XDG_DATA_HOME:-$HOME/.local/share}/runner"
    fi
}

# run_quiet LOGFILE CMD...: run CMD with its output in LOGFILE; on failure show the
# last lines of the log (the chatter of apt and debootstrap is not progress).
run_quiet() {
    local logfile=$1; shift
    "$@" >"$logfile" 2>&1 </dev/null && return 0
    local rc=$?
    log "command failed (exit $rc): $*; last lines of $logfile:"
    tail -n 25 "$logfile" | sed 's/^/    /' >&2
    return "$rc"
}

# apt_install PKG...: install Debian packages non-interactively, running
# `apt-get update` only when a package has no install candidate or the install fails
# (stale lists give 404s). Needs root.
apt_install() {
    local missing=() p cand t0 aptlog
    aptlog=$(mktemp /tmp/runner-apt.XXXXXX.log)
    export DEBIAN_FRONTEND=noninteractive
    for p in "$@"; do
        cand=$(apt-cache policy "$p" 2>/dev/null | awk '/Candidate:/ { print $2 }')
        if [[ -z $cand || $cand == "(none)" ]]; then missing+=("$p"); fi
    done
    if (( ${#missing[@]} )); then
        log "apt-get update (no install candidate for: ${missing[*]})"
        t0=$(now_us)
        run_quiet "$aptlog" apt-get update || die "apt-get update failed"
        log "apt-get update done in $(since "$t0")"
    fi
    log "apt-get install $*"
    t0=$(now_us)
    if ! run_quiet "$aptlog" apt-get install -y --no-install-recommends "$@"; then
        log "refreshing package lists (apt-get update) and retrying once"
        run_quiet "$aptlog" apt-get update || die "apt-get update failed"
        run_quiet "$aptlog" apt-get install -y --no-install-recommends "$@" \
            || die "apt-get install $* failed (log: $aptlog)"
    fi
    rm -f "$aptlog"  # kept only when something failed
    log "installed $* in $(since "$t0")"
}

docker_ok() { docker info >/dev/null 2>&1; }

image_exists() { docker image inspect "$1" >/dev/null 2>&1; }

image_size() { docker image inspect --format '{{.Size}}' "$1"; }
