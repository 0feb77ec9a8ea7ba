#!/usr/bin/env bash
# Build the sandbox image (sandbox_images/sandbox/Dockerfile) on top of the base image.
#
# Usage: sandbox_images/build-sandbox.sh [VERSION] [options]
#   VERSION               tag version (env RUNNER_SANDBOX_VERSION; default dev):
#                         the image is runner-sandbox:VERSION
#   --tag TAG             full tag instead (env RUNNER_SANDBOX_IMAGE)
#   --base IMAGE          base image (env RUNNER_BASE_IMAGE; default runner-base:bookworm-py3;
#                         built with build-base.sh if it is the local default and missing)
#   --requirements FILE   what to preinstall (env RUNNER_SANDBOX_REQUIREMENTS;
#                         default sandbox_images/sandbox/requirements.txt)
#   --refresh-wheels      download the wheels again even if cached
#   --no-cache            docker build --no-cache
#   --no-verify           skip the smoke test of the built image
#   -h, --help
#
# How the host's pip configuration reaches the build: wheels are downloaded on the host
# by `pip download` (so /etc/pip.conf, ~/.config/pip/pip.conf, PIP_* variables, local
# file:// indexes, find-links and certificates all apply), for the base image's Python
# version and platform, into $RUNNER_HOME/cache/wheels/<key>; the build installs them
# from the context with --no-index and no network. The host pip is `python3 -m pip`
# unless RUNNER_PIP says otherwise (e.g. RUNNER_PIP=".venv/bin/python -m pip").
#
# Second build with nothing changed: wheels come from the cache and every layer from the
# engine's build cache (a few seconds). Prints the tag on stdout when done.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
. "$HERE/common.sh"

REPO=$(cd "$HERE/.." && pwd)
DEFAULT_BASE=runner-base:bookworm-py3
VERSION=${RUNNER_SANDBOX_VERSION:-dev}
TAG=${RUNNER_SANDBOX_IMAGE:-}
BASE=${RUNNER_BASE_IMAGE:-$DEFAULT_BASE}
REQS=${RUNNER_SANDBOX_REQUIREMENTS:-$HERE/sandbox/requirements.txt}
WORKER_SRC=$REPO/runner/worker
read -r -a PIP <<<"${RUNNER_PIP:-python3 -m pip}"
REFRESH=0
BUILD_OPTS=()
VERIFY=1

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; }

while (( $# )); do
    case $1 in
        --tag) TAG=${2:?--tag needs a value}; shift 2 ;;
        --tag=*) TAG=${1#*=}; shift ;;
        --base) BASE=${2:?--base needs an image}; shift 2 ;;
        --base=*) BASE=${1#*=}; shift ;;
        --requirements) REQS=${2:?--requirements needs a file}; shift 2 ;;
        --requirements=*) REQS=${1#*=}; shift ;;
        --refresh-wheels) REFRESH=1; shift ;;
        --no-cache) BUILD_OPTS+=(--no-cache); shift ;;
        --no-verify) VERIFY=0; shift ;;
        -h|--help) usage; exit 0 ;;
        -*) usage; die 2 "unknown option: $1" ;;
        *) VERSION=$1; shift ;;
    esac
done
TAG=${TAG:-runner-sandbox:$VERSION}
[[ -f $REQS ]] || die 2 "requirements file not found: $REQS"
REQS=$(cd "$(dirname "$REQS")" && pwd)/$(basename "$REQS")
[[ -d $WORKER_SRC ]] || die 2 "worker sources not found: $WORKER_SRC"

T_START=$(now_us)

"$HERE/ensure-docker.sh" || die "no Docker engine (see the messages above)"

# ---------------------------------------------------------------- base image
if ! image_exists "$BASE"; then
    if [[ $BASE == "$DEFAULT_BASE" || $BASE == runner-base:* ]]; then
        log "base image $BASE is missing; building it"
        "$HERE/build-base.sh" --tag "$BASE" >/dev/null || die "building the base image failed"
    else
        log "pulling base image $BASE"
        docker pull "$BASE" >&2 || die "base image $BASE is neither local nor pullable"
    fi
fi

# What the base's interpreter accepts: Python version, ABI, libc and machine.
read -r PYVER ABI LIBC LIBCVER MACHINE < <(
    docker run --rm --network none --entrypoint python3 "$BASE" -c '
import platform, sys
libc, ver = platform.libc_ver()
print("%d.%d" % sys.version_info[:2], "cp%d%d" % sys.version_info[:2], libc or "none", ver or "0", platform.machine())
') || die "could not run python3 in the base image $BASE"
log "base $BASE: python $PYVER ($ABI), $LIBC $LIBCVER, $MACHINE"

PLATFORMS=()
if [[ $LIBC == glibc ]]; then
    glibc_minor=${LIBCVER#2.}; glibc_minor=${glibc_minor%%.*}
    for (( m = glibc_minor; m >= 17; m-- )); do PLATFORMS+=("manylinux_2_${m}_$MACHINE"); done
    PLATFORMS+=("manylinux2014_$MACHINE")
    if [[ $MACHINE == x86_64 || $MACHINE == i686 ]]; then
        PLATFORMS+=("manylinux2010_$MACHINE" "manylinux1_$MACHINE")
    fi
else
    die "the base image's libc ($LIBC) is not glibc; only manylinux wheels are handled"
fi

# ---------------------------------------------------------------- wheels (host pip)
CACHE=$(runner_home)/cache/wheels
KEY=$( { cat "$REQS"; echo "$PYVER $ABI ${PLATFORMS[*]}"; } | sha256sum | cut -c1-16)
WHEELS=$CACHE/$KEY
if (( REFRESH )) || [[ ! -f $WHEELS/.complete ]]; then
    "${PIP[@]}" --version >/dev/null 2>&1 || die "host pip (${PIP[*]}) does not run. Install it
(e.g. apt-get install python3-pip) or point RUNNER_PIP at one, e.g. RUNNER_PIP='.venv/bin/python -m pip'"
    log "downloading wheels for python $PYVER/$MACHINE with the host's pip configuration into $WHEELS"
    t0=$(now_us)
    mkdir -p "$CACHE"
    tmp=$(mktemp -d "$CACHE/.download.XXXXXX")
    platform_args=()
    for p in "${PLATFORMS[@]}"; do platform_args+=(--platform "$p"); done
    piplog=$tmp/pip-download.log
    if ! "${PIP[@]}" download --disable-pip-version-check --progress-bar off \
            --only-binary=:all: --python-version "$PYVER" --implementation cp --abi "$ABI" \
            "${platform_args[@]}" --dest "$tmp" -r "$REQS" 'pip>=23.1' \
            >"$piplog" 2>&1 </dev/null; then
        log "pip download failed; last lines of its output:"
        tail -n 25 "$piplog" | sed 's/^/    /' >&2
        rm -rf "$tmp"
        die "could not download the wheels (check the host's pip configuration: pip config list)"
    fi
    rm -f "$piplog"
    touch "$tmp/.complete"
    rm -rf "$WHEELS"
    mv "$tmp" "$WHEELS"
    log "downloaded $(find "$WHEELS" -name '*.whl' | wc -l) wheels ($(du -sh "$WHEELS" | cut -f1)) in $(since "$t0")"
else
    log "wheels cached: $WHEELS ($(find "$WHEELS" -name '*.whl' | wc -l) wheels)"
fi

# ---------------------------------------------------------------- build context
CTX=$(mktemp -d /tmp/runner-sandbox-ctx.XXXXXX)
trap 'rm -rf "$CTX"' EXIT
cp "$HERE/sandbox/Dockerfile" "$CTX/Dockerfile"
cp "$REQS" "$CTX/requirements.txt"
mkdir -p "$CTX/wheels" "$CTX/worker"
# Hard links when on the same file system (no copy), else a copy. The engine's cache
# compares contents, not times, so either way an unchanged wheel set hits the cache.
cp -l "$WHEELS"/*.whl "$CTX/wheels/" 2>/dev/null || cp "$WHEELS"/*.whl "$CTX/wheels/"
(cd "$WORKER_SRC" && find . -name '*.py' -not -path '*/__pycache__/*' -print0 \
    | xargs -0 cp --parents -t "$CTX/worker/")
log "context ready: $(du -shL "$CTX" | cut -f1), worker files: $(cd "$CTX/worker" && find . -name '*.py' | sed 's|^\./||' | sort | tr '\n' ' ')"

# ---------------------------------------------------------------- docker build
# BuildKit when the buildx plugin exists, else the classic builder (the Dockerfile
# works with both); explicitly so, because a client without buildx fails when
# DOCKER_BUILDKIT=1 is set in the environment.
if docker buildx version >/dev/null 2>&1; then export DOCKER_BUILDKIT=1; else export DOCKER_BUILDKIT=0; fi
REQ_HASH=$(sha256sum "$REQS" | cut -c1-12)
log "docker build -t $TAG (base $BASE, builder: $([[ $DOCKER_BUILDKIT == 1 ]] && echo BuildKit || echo classic))"
t0=$(now_us)
OLD_ID=$(docker image inspect --format '{{.Id}}' "$TAG" 2>/dev/null || true)
set +e
docker build --network none --build-arg "BASE_IMAGE=$BASE" \
    --label "org.runner.sandbox.version=$VERSION" \
    --label "org.runner.sandbox.base=$BASE" \
    --label "org.runner.sandbox.requirements=$REQ_HASH" \
    ${BUILD_OPTS[@]+"${BUILD_OPTS[@]}"} -t "$TAG" "$CTX" 2>&1 \
  | grep -v -e '^DEPRECATED: The legacy builder' -e 'BuildKit is currently disabled' \
        -e 'Install the buildx component' -e 'https://docs.docker.com/go/buildx' \
        -e '^ *environment-variable\.$' -e '^ *$' >&2
rc=${PIPESTATUS[0]}
set -e
(( rc == 0 )) || die "docker build failed (exit $rc)"
image_exists "$TAG" || die "docker build failed"
NEW_ID=$(docker image inspect --format '{{.Id}}' "$TAG")
if [[ -n $OLD_ID && $OLD_ID != "$NEW_ID" ]]; then
    log "built in $(since "$t0") (new image; the previous $TAG image was removed if unused)"
    docker image rm "$OLD_ID" >/dev/null 2>&1 || true
else
    log "built in $(since "$t0")${OLD_ID:+ (unchanged)}"
fi

# ---------------------------------------------------------------- smoke test
if (( VERIFY )); then
    t0=$(now_us)
    out=$(docker run --rm --network none --cap-drop ALL --security-opt no-new-privileges \
        --read-only --tmpfs /tmp:size=64m --user 10001 --pids-limit 64 \
        --memory 256m --memory-swap 256m --init "$TAG" \
        python3 -c 'import sympy, numpy, mpmath; print("sympy", sympy.__version__, "numpy", numpy.__version__, "mpmath", mpmath.__version__)' 2>&1) \
        || die "smoke test failed: $out"
    log "smoke test (hardened run) ok in $(since "$t0"): $out"
fi

log "$TAG: $(human_bytes "$(image_size "$TAG")"), total $(since "$T_START")"
printf '%s\n' "$TAG"
