#!/usr/bin/env bash
# Make sure a Docker engine answers on this machine; idempotent.
#
# Usage: sandbox_images/ensure-docker.sh [-h|--help]
#
# If `docker info` works: exit 0 at once. Otherwise, as root: install Debian's docker.io
# (apt-get update only when needed), check what the engine needs here (cgroups,
# iptables), wait for a dockerd that is still exiting (an engine stopped a moment ago),
# start dockerd in the background (no systemd needed), wait for it, and prove it by
# running a tiny container with the sandbox's hardening flags. Not root: print what to
# do and exit non-zero.
#
# The storage driver is changed only when the evidence says the current one is what
# keeps containers from running (dockerd's fatal error or the probe's error names it),
# never because a daemon did not answer: a new driver cannot see the images stored with
# the old one. When it does change, the script says so and rebuilds the sandbox images
# (with $RUNNER_CLI, else the checkout's .venv/bin/runner, else `runner` on PATH).
#
# Environment:
#   RUNNER_DOCKERD_LOG             dockerd's log file (default /var/log/runner-dockerd.log)
#   RUNNER_DOCKER_WAIT             seconds to wait for the engine (default 60)
#   RUNNER_DOCKER_STORAGE_DRIVER   force a storage driver (overlay2, fuse-overlayfs, vfs);
#                                  default: the engine's choice, with a fallback if it fails
#   RUNNER_CLI                     the runner command that rebuilds images after a driver
#                                  change (e.g. "/path/to/python -m runner")
#
# Exit status: 0 engine up; 1 could not start it; 2 needs root (instructions printed);
# 3 engine runs but this user may not use it.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
. "$HERE/common.sh"

DOCKERD_LOG=${RUNNER_DOCKERD_LOG:-/var/log/runner-dockerd.log}
WAIT_S=${RUNNER_DOCKER_WAIT:-60}
FORCED_DRIVER=${RUNNER_DOCKER_STORAGE_DRIVER:-}
DAEMON_JSON=/etc/docker/daemon.json
PIDFILE=/var/run/docker.pid
PROBE_IMAGE=runner-probe:tini

case ${1:-} in
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 0 ;;
    "") ;;
    *) die 2 "unknown argument: $1 (see --help)" ;;
esac

T_START=$(now_us)

engine_summary() {
    docker info --format \
        'server {{.ServerVersion}}, storage driver {{.Driver}}, cgroup v{{.CgroupVersion}} ({{.CgroupDriver}}), runtimes: {{range $k, $v := .Runtimes}}{{$k}} {{end}}' \
        2>/dev/null || true
}

# ---------------------------------------------------------------- already up?
if command -v docker >/dev/null 2>&1 && docker_ok; then
    log "engine already running: $(engine_summary)"
    exit 0
fi

if command -v docker >/dev/null 2>&1; then
    info_err=$(docker info 2>&1 >/dev/null || true)
    if grep -qi 'permission denied' <<<"$info_err"; then
        die 3 "a Docker engine is running but user '$(id -un)' may not use its socket:
    $info_err
Fix: add yourself to the docker group and start a new login session:
    sudo usermod -aG docker $(id -un)    # then log out and back in (or: newgrp docker)"
    fi
fi

if [[ -n ${DOCKER_HOST:-} && $DOCKER_HOST != unix:///var/run/docker.sock && $DOCKER_HOST != unix:///run/docker.sock ]]; then
    die 1 "DOCKER_HOST=$DOCKER_HOST does not answer; this script only starts a local engine.
Unset DOCKER_HOST to use a local engine, or start the engine DOCKER_HOST points to."
fi

if ! is_root; then
    die 2 "no Docker engine answers, and starting one needs root. Do one of:
  - run this script as root:   sudo $0
  - or by hand (Debian/Ubuntu):
        sudo apt-get update && sudo apt-get install -y docker.io
        sudo systemctl start docker        # no systemd: sudo sh -c 'nohup dockerd >$DOCKERD_LOG 2>&1 &'
        sudo usermod -aG docker $(id -un)  # then log out and back in
  - or point DOCKER_HOST at an engine you can use (e.g. rootless Docker:
        dockerd-rootless-setuptool.sh install; export DOCKER_HOST=unix://\$XDG_RUNTIME_DIR/docker.sock)"
fi

# ---------------------------------------------------------------- packages
need=()
if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker >/dev/null 2>&1; then
    need+=(docker.io)  # engine, client, containerd, runc, tini (--init)
fi
command -v iptables >/dev/null 2>&1 || need+=(iptables)
if (( ${#need[@]} )); then
    apt_install "${need[@]}"
else
    log "dockerd is installed: $(dockerd --version 2>/dev/null || echo unknown version)"
fi
command -v dockerd >/dev/null 2>&1 || die "dockerd is still missing after installing docker.io"

# ---------------------------------------------------------------- daemon.json
# daemon_json_set KEY JSON-VALUE: set one key, keeping whatever else is configured.
daemon_json_set() {
    mkdir -p "$(dirname "$DAEMON_JSON")"
    python3 - "$DAEMON_JSON" "$1" "$2" <<'EOF'
import json, os, sys
path, key, value = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
conf = {}
if os.path.exists(path) and os.path.getsize(path) > 0:
    with open(path) as f:
        conf = json.load(f)
conf[key] = value
with open(path + ".tmp", "w") as f:
    json.dump(conf, f, indent=2)
    f.write("\n")
os.replace(path + ".tmp", path)
EOF
    log "set \"$1\": $2 in $DAEMON_JSON"
}

configured_driver() {
    [[ -s $DAEMON_JSON ]] || return 0
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("storage-driver", ""))' "$DAEMON_JSON" 2>/dev/null || true
}

# ---------------------------------------------------------------- cgroups
t0=$(now_us)
if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
    log "cgroups: v2 (unified) at /sys/fs/cgroup, controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
elif awk '$3 == "cgroup" { found = 1 } END { exit !found }' /proc/mounts; then
    v1=$(awk '$3 == "cgroup" { n = split($2, p, "/"); printf "%s ", p[n] }' /proc/mounts)
    log "cgroups: v1 hierarchies mounted: $v1"
    if awk '$3 == "cgroup2" { found = 1 } END { exit !found }' /proc/mounts; then
        log "  (hybrid layout: cgroup2 also mounted at $(awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts); the engine uses v1)"
    fi
    for c in memory pids cpu; do
        awk -v c="$c" '$3 == "cgroup" && ("," $4 ",") ~ ("," c ",") { found = 1 } END { exit !found }' /proc/mounts \
            || log "warning: cgroup v1 controller '$c' is not mounted; limits that need it will fail"
    done
else
    log "cgroups: nothing mounted; mounting cgroup2 at /sys/fs/cgroup"
    mount -t cgroup2 cgroup2 /sys/fs/cgroup \
        || die "could not mount cgroups; the engine cannot limit containers without them"
fi

# ---------------------------------------------------------------- iptables
if iptables -t nat -L -n >/dev/null 2>&1; then
    log "iptables works ($(iptables --version 2>/dev/null))"
elif command -v iptables-legacy >/dev/null 2>&1 && iptables-legacy -t nat -L -n >/dev/null 2>&1; then
    log "iptables-nft fails here, iptables-legacy works: switching the alternative"
    update-alternatives --set iptables /usr/sbin/iptables-legacy >&2
    update-alternatives --set ip6tables /usr/sbin/ip6tables-legacy >&2 || true
else
    log "warning: no working iptables; configuring the engine without iptables and bridge."
    log "  Only --network none containers will work (the sandbox never needs more);"
    log "  builds must use 'docker build --network none' (build-sandbox.sh does)."
    daemon_json_set iptables false
    daemon_json_set bridge '"none"'
fi
if [[ -n $FORCED_DRIVER && $(configured_driver) != "$FORCED_DRIVER" ]]; then
    daemon_json_set storage-driver "\"$FORCED_DRIVER\""
fi
log "checks done in $(since "$t0")"

# ---------------------------------------------------------------- start / wait
# The dockerd processes of this engine: every dockerd except those started with a pid
# file of their own (a second engine with another data root may run beside this one).
engine_daemons() {
    local dir cmd
    for dir in /proc/[0-9]*; do
        [[ $(cat "$dir/comm" 2>/dev/null) == dockerd ]] || continue
        cmd=$(tr '\0' ' ' <"$dir/cmdline" 2>/dev/null) || continue
        if [[ " $cmd" =~ \ (--pidfile|-p)[=\ ]([^ ]+) && ${BASH_REMATCH[2]} != "$PIDFILE" ]]; then
            continue
        fi
        printf '%s\n' "${dir#/proc/}"
    done
}

# The containerd that dockerd starts for itself (it outlives dockerd by a moment).
managed_containerd() {
    local dir
    for dir in /proc/[0-9]*; do
        [[ $(cat "$dir/comm" 2>/dev/null) == containerd ]] || continue
        tr '\0' ' ' <"$dir/cmdline" 2>/dev/null | grep -q '/var/run/docker/containerd/' \
            && printf '%s\n' "${dir#/proc/}"
    done
    return 0
}

# A dockerd that does not answer is starting or exiting (`kill`, `systemctl stop` and
# `service docker restart` all return before the old daemon is gone: it first closes its
# socket, then stops its containers and containerd, which takes seconds). Starting a
# second one meanwhile fails, and that failure says nothing about the storage driver.
# So: wait until it answers or is gone. Returns 1 if it does neither in time.
settle_daemons() {
    local pids t0 deadline
    pids=$(engine_daemons)
    [[ -n $pids ]] || return 0
    t0=$(now_us)
    deadline=$(( $(date +%s) + WAIT_S ))
    log "dockerd (pid $(echo $pids)) runs but does not answer: waiting until it answers or exits"
    while :; do
        if docker_ok; then
            log "the running dockerd answered after $(since "$t0")"
            return 0
        fi
        pids=$(engine_daemons)
        if [[ -z $pids && -z $(managed_containerd) ]]; then
            log "the old dockerd is gone after $(since "$t0")"
            return 0
        fi
        if (( $(date +%s) >= deadline )); then
            log "dockerd (pid $(echo $pids)) neither answered nor exited within ${WAIT_S}s"
            return 1
        fi
        sleep 0.2
    done
}

STARTED_PID=""
LOG_OFFSET=0
start_dockerd() {
    STARTED_PID=""
    settle_daemons || die "a dockerd that neither answers nor exits is in the way; stop it (kill $(echo $(engine_daemons))) and run this again (log: $DOCKERD_LOG)"
    if docker_ok; then
        return 0
    fi
    if [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null 2>&1; then
        log "starting the engine with systemd (systemctl start docker)"
        systemctl start docker >&2 || die "systemctl start docker failed; see: journalctl -u docker"
        return 0
    fi
    rm -f "$PIDFILE"  # stale (no dockerd of this engine runs): dockerd refuses to start while it exists
    mkdir -p "$(dirname "$DOCKERD_LOG")"
    LOG_OFFSET=$(stat -c %s "$DOCKERD_LOG" 2>/dev/null || echo 0)
    log "starting dockerd in the background (log: $DOCKERD_LOG)"
    printf '\n==== %s: started by %s ====\n' "$(date -u +%FT%TZ)" "$0" >>"$DOCKERD_LOG"
    # setsid: its own session, so it outlives this script and its terminal.
    setsid nohup dockerd >>"$DOCKERD_LOG" 2>&1 </dev/null &
    STARTED_PID=$!
}

recent_log() { tail -c "+$(( LOG_OFFSET + 1 ))" "$DOCKERD_LOG" 2>/dev/null || true; }

# Last words of dockerd: its errors, else the end of the log (the grpc chatter is noise).
show_dockerd_log() {
    local errs
    local recent
    recent=$(recent_log)
    errs=$(grep -E 'level=(error|fatal)|^failed to start|^Error' <<<"$recent" | tail -n 8 || true)
    log "last errors in $DOCKERD_LOG:"
    if [[ -n $errs ]]; then printf '%s\n' "$errs"; else tail -n 10 <<<"$recent"; fi | sed 's/^/    /' >&2
}

wait_for_engine() {
    local t0 deadline
    t0=$(now_us)
    deadline=$(( $(date +%s) + WAIT_S ))
    while ! docker_ok; do
        if (( $(date +%s) >= deadline )); then
            log "the engine did not answer within ${WAIT_S}s"
            show_dockerd_log
            return 1
        fi
        if [[ -n $STARTED_PID ]] && ! kill -0 "$STARTED_PID" 2>/dev/null; then
            sleep 0.3  # it may be writing its last words
            log "dockerd exited"
            show_dockerd_log
            return 1
        fi
        sleep 0.25
    done
    log "engine answered after $(since "$t0")"
}

stop_dockerd() {
    local pids _
    pids=$(engine_daemons)
    [[ -n $pids ]] || return 0
    log "stopping dockerd (pid $(echo $pids))"
    # shellcheck disable=SC2086
    kill $pids 2>/dev/null || true
    for _ in $(seq 1 120); do
        [[ -z $(engine_daemons) && -z $(managed_containerd) ]] && return 0
        sleep 0.5
    done
    die "dockerd (pid $(echo $pids)) did not stop"
}

# Evidence that the storage driver, and nothing else, keeps containers from running:
# set by try_engine from dockerd's fatal errors or the probe container's error.
STORAGE_EVIDENCE=""
STORAGE_SIGNS='graphdriver|storage.driver|driver not supported|overlay|d_type|backing file ?system|failed to register layer'

storage_evidence_in() {
    # "contains several valid graphdrivers" asks a person to choose: not a broken driver.
    grep -iE "$STORAGE_SIGNS" <<<"$1" | grep -viE 'several valid graphdrivers' | head -n 1 || true
}

# A container started with the sandbox's flags proves the storage driver, runc, the
# cgroup limits, seccomp and docker-init all work here. The image is one static binary
# (tini, which docker.io already depends on), imported, so no registry is needed.
probe_engine() {
    local tini probe_err
    tini=$(command -v tini-static || true)
    [[ -n $tini ]] || { log "no tini-static binary to build a probe image from; skipping the run check"; return 0; }
    if ! image_exists "$PROBE_IMAGE"; then
        local dir
        dir=$(mktemp -d)
        # The usual top-level directories, so that mount points such as /sbin/docker-init
        # (for --init) exist with normal permissions rather than being created by runc.
        mkdir -p "$dir"/{bin,sbin,etc,dev,proc,sys,tmp}
        chmod 0755 "$dir" "$dir"/{bin,sbin,etc,dev,proc,sys}
        chmod 1777 "$dir/tmp"
        cp "$tini" "$dir/bin/tini"
        if ! probe_err=$(tar --numeric-owner -C "$dir" -c . \
                | docker import --change 'LABEL org.runner.probe=1' - "$PROBE_IMAGE" 2>&1 >/dev/null); then
            rm -rf "$dir"
            log "importing the probe image failed: $probe_err"
            STORAGE_EVIDENCE=$(storage_evidence_in "$probe_err")
            return 1
        fi
        rm -rf "$dir"
    fi
    if probe_err=$(docker run --rm --pull never --network none --cap-drop ALL --security-opt no-new-privileges \
            --read-only --tmpfs /tmp:size=16m --user 10001 --pids-limit 32 \
            --memory 64m --memory-swap 64m --init "$PROBE_IMAGE" /bin/tini --version 2>&1); then
        log "probe container ran with the sandbox flags (storage driver $(docker info --format '{{.Driver}}'))"
        if ! docker run --rm --pull never "$PROBE_IMAGE" /bin/tini --version >/dev/null 2>&1; then
            log "warning: a container on the default bridge network failed; --network none works"
        fi
        return 0
    fi
    log "probe container failed: $probe_err"
    STORAGE_EVIDENCE=$(storage_evidence_in "$probe_err")
    return 1
}

try_engine() {
    STORAGE_EVIDENCE=""
    start_dockerd
    if ! wait_for_engine; then
        # Only the fatal errors of the daemon this script started count as evidence.
        if [[ -n $STARTED_PID ]]; then
            STORAGE_EVIDENCE=$(storage_evidence_in "$(grep -E 'level=(error|fatal)|^failed to start' <<<"$(recent_log)")")
        fi
        return 1
    fi
    probe_engine
}

# The images a driver holds (they are invisible under any other driver).
images_under() {
    docker images --format '{{.Repository}}:{{.Tag}}' 2>/dev/null | grep -v '^<none>' | grep -v "^${PROBE_IMAGE}\$" || true
}

# Rebuild the sandbox images after a driver change, with the runner of this checkout.
rebuild_images() {
    local cmd=()
    if [[ -n ${RUNNER_CLI:-} ]]; then
        read -r -a cmd <<<"$RUNNER_CLI"
    elif [[ -x $HERE/../.venv/bin/runner ]]; then
        cmd=("$HERE/../.venv/bin/runner")
    elif command -v runner >/dev/null 2>&1; then
        cmd=(runner)
    else
        log "no runner command found to rebuild the images: run \`runner images build\`"
        return 0
    fi
    log "rebuilding the sandbox images under the new storage driver: ${cmd[*]} images build"
    "${cmd[@]}" images build >&2 \
        || die "rebuilding the images failed (see above); run \`runner images build\` once that is fixed"
}

if ! try_engine; then
    # Storage is what usually breaks inside VMs and containers (overlay on overlay,
    # no d_type, ...), and slower drivers work anywhere. But a new driver does not see
    # the images stored under the old one: switch only on evidence that the storage
    # driver is what fails, never because a daemon did not answer.
    [[ -z $FORCED_DRIVER ]] || die "the engine does not work with storage driver $FORCED_DRIVER \
(RUNNER_DOCKER_STORAGE_DRIVER); unset it to let this script choose (log: $DOCKERD_LOG)"
    [[ -n $STORAGE_EVIDENCE ]] || die "the engine does not work, and nothing points at its storage driver, \
so the driver (and the images stored with it) stays as it is. The errors above say what fails (log: $DOCKERD_LOG)"
    failed=$(configured_driver); failed=${failed:-$(docker info --format '{{.Driver}}' 2>/dev/null || true)}
    failed=${failed:-overlay2}
    orphaned=$(images_under)
    ok=0
    for driver in fuse-overlayfs vfs; do
        [[ $driver == "$failed" ]] && continue
        if [[ $driver == fuse-overlayfs ]]; then
            [[ -e /dev/fuse ]] || { log "no /dev/fuse: skipping fuse-overlayfs"; continue; }
            command -v fuse-overlayfs >/dev/null 2>&1 || apt_install fuse-overlayfs
        fi
        log "storage driver $failed cannot run containers here: $STORAGE_EVIDENCE"
        log "switching the storage driver to $driver. Images stored under $failed are not visible"
        log "  under $driver${orphaned:+ ($(echo $orphaned))}: the sandbox images will be rebuilt."
        log "  To return to $failed later, remove \"storage-driver\" from $DAEMON_JSON and restart the engine."
        stop_dockerd
        daemon_json_set storage-driver "\"$driver\""
        if try_engine; then ok=1; break; fi
        [[ -n $STORAGE_EVIDENCE ]] || die "the engine does not work with storage driver $driver either, \
for a reason other than storage (see above; log: $DOCKERD_LOG)"
        failed=$driver
    done
    (( ok )) || die "containers do not run on this engine with any storage driver (log: $DOCKERD_LOG)"
    rebuild_images
fi
docker image rm "$PROBE_IMAGE" >/dev/null 2>&1 || true

log "engine up in $(since "$T_START"): $(engine_summary)"
if ! docker info --format '{{range $k, $v := .Runtimes}}{{$k}} {{end}}' | grep -qw runsc; then
    log "note: gVisor (runtime runsc) is not installed; containers use runc"
fi
