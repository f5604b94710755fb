#!/usr/bin/env bash
# Make sure the installed llama-cpp-python was built the way localspec's tests and promises need:
#   -DGGML_RPC=on        llama.cpp's RPC backend (localspec worker, --rpc)
#   -DGGML_LLAMAFILE=OFF no llamafile sgemm: llama.cpp's CPU backend then computes a token alike
#                        alone and inside a batch, so coupled verification's "same seed, same
#                        text as --no-speculative" holds token for token (README, "Same seed").
#
# pip's wheel cache keys a wheel it built by the source it came from, not by CMAKE_ARGS, so a
# machine that once built llama-cpp-python otherwise hands that build back whatever CMAKE_ARGS
# says. Then this drops that cached wheel and builds again (several minutes); pip caches the new
# build in its place, so this happens once per machine.
set -euo pipefail

check='import llama_cpp, sys
info = llama_cpp.llama_print_system_info().decode()
sys.exit(0 if llama_cpp.llama_supports_rpc() and "LLAMAFILE = 1" not in info else 1)'
built_right() { python -c "$check" 2>/dev/null; }

built_right && exit 0
version="$(python -c "import importlib.metadata as m; print(m.version('llama_cpp_python'))")"
echo "llama-cpp-python $version was built without RPC or with llamafile: building it again" >&2
pip cache remove "llama_cpp_python-$version-*" >/dev/null 2>&1 || true
CMAKE_ARGS="${CMAKE_ARGS:+$CMAKE_ARGS }-DGGML_RPC=on -DGGML_LLAMAFILE=OFF" pip install --force-reinstall --no-deps "llama-cpp-python==$version"
built_right || { echo "llama-cpp-python still lacks RPC or still uses llamafile" >&2; exit 1; }
