#!/usr/bin/env bash
# GPU check, on a machine with an NVIDIA GPU and the CUDA toolkit:
#   1. a CUDA build of llama.cpp for llama-cpp-python (unless the installed one offloads already);
#   2. `localspec info`, the tests marked gpu, the statistical (losslessness) tests unchanged;
#   3. `localspec bench` and the per-pass profile on the demo pair.
#
#   bash scripts/gpu_check.sh                          # rebuild llama-cpp-python with CUDA through pip
#   LLAMA_CPP_SDIST=llama_cpp_python-0.3.36.tar.gz bash scripts/gpu_check.sh
#                                                      # no registry: build only the library from the sdist
#   LLAMA_CPP_LIB_PATH=/opt/llama/lib bash scripts/gpu_check.sh   # a library built separately
#
# CUDA_ARCHITECTURES (default: native) is passed to CMake. Run from a venv with `pip install -e ".[test]"`.
set -euo pipefail
cd "$(dirname "$0")/.."
arch="${CUDA_ARCHITECTURES:-native}"

offloads() {
    # Import llama_cpp before numpy: some CUDA builds crash the other way round. A GPU device, not
    # llama_supports_gpu_offload(): that is also true for a CPU build with the RPC backend.
    python -c "import llama_cpp, sys; from localspec.runtime.devices import gpu_devices; sys.exit(0 if gpu_devices() else 1)" 2>/dev/null
}

if ! offloads; then
    if [ -n "${LLAMA_CPP_SDIST:-}" ]; then
        work="$(mktemp -d)"
        tar -xzf "$LLAMA_CPP_SDIST" -C "$work"
        source_dir="$(echo "$work"/*/vendor/llama.cpp)"
        echo "building llama.cpp with CUDA from $source_dir ($(nproc) jobs)" >&2
        cmake -S "$source_dir" -B "$work/build" -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" \
            -DBUILD_SHARED_LIBS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
            -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_CURL=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
        cmake --build "$work/build" -j "$(nproc)" >/dev/null
        mkdir -p "$work/lib" && find "$work/build" -name "*.so*" -exec cp -P {} "$work/lib/" \;
        export LLAMA_CPP_LIB_PATH="$work/lib"
    else
        version="$(python -c "import importlib.metadata as m; print(m.version('llama_cpp_python'))")"
        # --no-cache-dir: pip's wheel cache would hand back the CPU build whatever CMAKE_ARGS says.
        CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=$arch" \
            pip install --force-reinstall --no-cache-dir --no-deps "llama-cpp-python==$version"
    fi
    offloads || { echo "gpu_check: llama.cpp still cannot offload to a GPU (is the CUDA toolkit installed?)" >&2; exit 1; }
fi

python -m localspec info
python -m pytest -q -rs -m gpu tests/test_gpu.py
python -m pytest -q tests/test_lossless_tiny.py tests/test_acceptance.py tests/test_real_weights.py
python -m localspec bench --prompts 8 --temperatures 0,0.8 --strategy model,hybrid --draft-max 4,8,adaptive
python scripts/profile_passes.py --prompts 4 --tokens 96
