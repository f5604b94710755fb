#!/usr/bin/env bash
# Make sure the installed llama-cpp-python was built with llama.cpp's RPC backend (-DGGML_RPC=on).
#
# pip's wheel cache keys a wheel it built by the source it came from, not by CMAKE_ARGS, so a
# machine that once built llama-cpp-python without RPC hands that build back whatever CMAKE_ARGS
# says. Then this drops that cached wheel and builds again with RPC (several minutes); pip caches
# the new build in its place, so this happens once per machine.
set -euo pipefail

has_rpc() { python -c "import llama_cpp, sys; sys.exit(0 if llama_cpp.llama_supports_rpc() else 1)" 2>/dev/null; }

has_rpc && exit 0
version="$(python -c "import importlib.metadata as m; print(m.version('llama_cpp_python'))")"
echo "llama-cpp-python $version was built without RPC: building it again with -DGGML_RPC=on" >&2
pip cache remove "llama_cpp_python-$version-*" >/dev/null 2>&1 || true
CMAKE_ARGS="${CMAKE_ARGS:+$CMAKE_ARGS }-DGGML_RPC=on" pip install --force-reinstall --no-deps "llama-cpp-python==$version"
has_rpc || { echo "llama-cpp-python still has no RPC backend" >&2; exit 1; }
