#!/usr/bin/env bash
# Build the sandbox's base image: a minimal Debian root with python3, made locally with
# debootstrap (no image registry needed) and imported with `docker import`.
#
# Usage: sandbox_images/build-base.sh [options]
#   --tag TAG           image tag to create (env RUNNER_BASE_IMAGE; default runner-base:bookworm-py3)
#   --force             rebuild even if TAG already exists (default: skip, it is cached)
#   --from-pull IMAGE   do not debootstrap: `docker pull IMAGE` and tag it as TAG
#                       (env RUNNER_BASE_FROM_PULL; e.g. python:3.11-slim)
#   --mirror URL        Debian mirror (env RUNNER_DEBIAN_MIRROR; default: the one apt uses
#                       on this machine, from /etc/apt/sources.list*)
#   --suite SUITE       Debian suite (env RUNNER_DEBIAN_SUITE; default bookworm)
#   -h, --help
#
# Needs a running engine (it calls ensure-docker.sh) and, for debootstrap, root.
# Debootstrap's downloaded .debs are kept in $RUNNER_HOME/cache/debootstrap so a
# --force rebuild does not download them again. Prints the tag on stdout when done.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
. "$HERE/common.sh"

TAG=${RUNNER_BASE_IMAGE:-runner-base:bookworm-py3}
FROM_PULL=${RUNNER_BASE_FROM_PULL:-}
MIRROR=${RUNNER_DEBIAN_MIRROR:-}
SUITE=${RUNNER_DEBIAN_SUITE:-bookworm}
FORCE=0

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; }

while (( $# )); do
    case $1 in
        --tag) TAG=${2:?--tag needs a value}; shift 2 ;;
        --tag=*) TAG=${1#*=}; shift ;;
        --force) FORCE=1; shift ;;
        --from-pull) FROM_PULL=${2:?--from-pull needs an image}; shift 2 ;;
        --from-pull=*) FROM_PULL=${1#*=}; shift ;;
        --mirror) MIRROR=${2:?--mirror needs a URL}; shift 2 ;;
        --mirror=*) MIRROR=${1#*=}; shift ;;
        --suite) SUITE=${2:?--suite needs a value}; shift 2 ;;
        --suite=*) SUITE=${1#*=}; shift ;;
        -h|--help) usage; exit 0 ;;
        *) usage; die 2 "unknown argument: $1" ;;
    esac
done

T_START=$(now_us)

"$HERE/ensure-docker.sh" || die "no Docker engine (see the messages above)"

if image_exists "$TAG" && (( ! FORCE )); then
    log "$TAG already exists ($(human_bytes "$(image_size "$TAG")")); skipping (use --force to rebuild)"
    printf '%s\n' "$TAG"
    exit 0
fi

report_done() {
    local py
    py=$(docker run --rm --network none "$TAG" python3 -c 'import sys; print(sys.version.split()[0])' 2>/dev/null) \
        || die "$TAG was created but python3 does not run in it"
    log "built $TAG: python $py, $(human_bytes "$(image_size "$TAG")"), in $(since "$T_START")"
    printf '%s\n' "$TAG"
}

# ---------------------------------------------------------------- --from-pull
if [[ -n $FROM_PULL ]]; then
    log "pulling $FROM_PULL"
    t0=$(now_us)
    docker pull "$FROM_PULL" >&2 || die "docker pull $FROM_PULL failed (is a registry reachable?); \
drop --from-pull / RUNNER_BASE_FROM_PULL to build the base locally with debootstrap"
    docker tag "$FROM_PULL" "$TAG"
    log "pulled and tagged $FROM_PULL as $TAG in $(since "$t0")"
    report_done
    exit 0
fi

# ---------------------------------------------------------------- debootstrap
is_root || die 2 "building the base with debootstrap needs root. Either run
    sudo $0 ${*:-}
or, if an image registry is reachable, use a published image instead:
    $0 --from-pull python:3.11-slim"

if ! command -v debootstrap >/dev/null 2>&1; then
    apt_install debootstrap
fi

# The mirror apt uses here: the first enabled "deb" source for $SUITE, from deb822
# *.sources files or one-line sources.list entries. Falls back to deb.debian.org.
detect_mirror() {
    local f
    for f in /etc/apt/sources.list.d/*.sources; do
        [[ -f $f ]] || continue
        awk -v suite="$SUITE" '
            function flush() {
                if (types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " suite " ") && enabled != "no" && uris != "") {
                    split(uris, u, " "); print u[1]; found = 1; exit
                }
                types = suites = uris = ""; enabled = "yes"
            }
            BEGIN { enabled = "yes" }
            /^[ \t]*$/ { flush(); next }
            /^[ \t]*#/ { next }
            { key = tolower($1); sub(/:$/, "", key); $1 = ""; sub(/^ +/, "") }
            key == "types" { types = $0 } key == "suites" { suites = $0 }
            key == "uris" { uris = $0 } key == "enabled" { enabled = tolower($0) }
            END { if (!found) flush() }' "$f"
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [[ -f $f ]] || continue
        awk -v suite="$SUITE" '
            $1 == "deb" { i = 2; if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
                          if ($(i + 1) == suite) { print $i; exit } }' "$f"
    done
}
if [[ -z $MIRROR ]]; then
    MIRROR=$(detect_mirror | grep -E '^https?://' | head -n 1 || true)
    MIRROR=${MIRROR:-http://deb.debian.org/debian}
    log "using the Debian mirror apt uses here: $MIRROR"
fi

CACHE=$(runner_home)/cache
DEB_CACHE=$CACHE/debootstrap/$SUITE-$(dpkg --print-architecture 2>/dev/null || uname -m)
mkdir -p "$DEB_CACHE"

ROOT=$(mktemp -d /var/tmp/runner-base.XXXXXX)
# mktemp makes it 0700, and the tar below records "./" as the image's "/": a 0700 root
# locks every non-root user out of everything (hidden by overlay2, fatal with vfs).
chmod 0755 "$ROOT"
DBLOG=$CACHE/debootstrap/last-build.log

cleanup() {
    # debootstrap mounts /proc, /sys, ... inside the target; never rm -rf through them.
    local m
    awk -v r="$ROOT" 'index($2, r) == 1 { print $2 }' /proc/mounts | sort -r \
        | while read -r m; do umount -l "$m" 2>/dev/null || true; done
    if awk -v r="$ROOT" 'index($2, r) == 1 { found = 1 } END { exit !found }' /proc/mounts; then
        log "warning: mounts remain under $ROOT; not removing it"
    else
        rm -rf --one-file-system "$ROOT"
    fi
}
trap cleanup EXIT

log "debootstrap --variant=minbase --include=python3 $SUITE (log: $DBLOG; .deb cache: $DEB_CACHE)"
t0=$(now_us)
run_quiet "$DBLOG" debootstrap --variant=minbase --include=python3 --cache-dir="$DEB_CACHE" \
    "$SUITE" "$ROOT" "$MIRROR" || die "debootstrap failed (log: $DBLOG)"
log "debootstrap done in $(since "$t0"): $(du -sh --one-file-system "$ROOT" | cut -f1) on disk"

log "trimming docs, man pages, locales, apt lists and caches"
t0=$(now_us)
(
    cd "$ROOT"
    # Keep copyright files (licences), drop the rest of the documentation.
    find usr/share/doc -mindepth 1 ! -type d ! -name copyright -delete
    find usr/share/doc -mindepth 1 -type d -empty -delete
    rm -rf usr/share/man/* usr/share/info/* usr/share/lintian usr/share/linda \
        usr/share/locale/* usr/lib/locale/locale-archive \
        var/lib/apt/lists/* var/cache/apt/* var/cache/debconf/*-old var/lib/dpkg/*-old \
        var/cache/ldconfig/aux-cache tmp/* var/tmp/*
    find var/log -type f -delete
    # The engine provides these at run time.
    : > etc/resolv.conf; : > etc/hostname; : > etc/machine-id 2>/dev/null || true
    # Packages installed later (FROM this image) stay trimmed too, as in debian:*-slim.
    mkdir -p etc/dpkg/dpkg.cfg.d etc/apt/apt.conf.d
    cat > etc/dpkg/dpkg.cfg.d/90-runner-nodoc <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
EOF
    cat > etc/apt/apt.conf.d/90-runner-clean <<'EOF'
APT::Install-Recommends "false";
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };
Acquire::Languages "none";
EOF
)
log "trimmed in $(since "$t0"): $(du -sh --one-file-system "$ROOT" | cut -f1) on disk"

log "importing into the engine as $TAG"
t0=$(now_us)
PYVER=$(chroot "$ROOT" python3 -c 'import sys; print(sys.version.split()[0])')
# Old image under this tag (with --force) is left dangling; remove it afterwards.
OLD_ID=$(docker image inspect --format '{{.Id}}' "$TAG" 2>/dev/null || true)
tar --numeric-owner --xattrs -C "$ROOT" -c \
    --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' --exclude='./run/*' . \
  | docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'CMD ["python3"]' \
        --change "LABEL org.runner.base.source=debootstrap org.runner.base.suite=$SUITE org.runner.base.python=$PYVER" \
        --message "runner base: debootstrap $SUITE minbase + python3 $PYVER from $MIRROR" \
        - "$TAG" >/dev/null || die "docker import failed"
log "imported in $(since "$t0")"
NEW_ID=$(docker image inspect --format '{{.Id}}' "$TAG")
if [[ -n $OLD_ID && $OLD_ID != "$NEW_ID" ]] && ! docker image rm "$OLD_ID" >/dev/null 2>&1; then
    log "the previous $TAG (${OLD_ID#sha256:}) is kept while images built on it exist;"
    log "  after rebuilding them (build-sandbox.sh), 'docker image prune' reclaims it"
fi

report_done
