#!/usr/bin/env bash
# Make sure the installed llama-cpp-python was built the way localspec's tests expect:
#   -DGGML_RPC=on   llama.cpp's RPC backend (localspec worker, --rpc)
#   llamafile on    llama.cpp's default CPU build (its llamafile matrix kernels), as users get it;
#                   the identity tests then check that every target pass is computed as a batch
#                   (README, "Same seed, same text"). With -DGGML_LLAMAFILE=OFF in CMAKE_ARGS, the
#                   build without them is what is checked for instead.
#
# pip's wheel cache keys a wheel it built by the source it came from, not by CMAKE_ARGS, so a
# machine that once built llama-cpp-python otherwise hands that build back whatever CMAKE_ARGS
# says. Then this drops that cached wheel and builds again (several minutes); pip caches the new
# build in its place, so this happens once per machine.
set -euo pipefail

# (CMake's false values, in any case: OFF, 0, NO, FALSE, N)
if [[ " ${CMAKE_ARGS:-} " =~ [[:space:]]-DGGML_LLAMAFILE(:BOOL)?=([Oo][Ff][Ff]|0|[Nn][Oo]?|[Ff][Aa][Ll][Ss][Ee])[[:space:]] ]]; then
    want_llamafile=0; llamafile_flag="-DGGML_LLAMAFILE=OFF"
else
    want_llamafile=1; llamafile_flag="-DGGML_LLAMAFILE=ON"
fi
check="import llama_cpp, sys
info = llama_cpp.llama_print_system_info().decode()
sys.exit(0 if llama_cpp.llama_supports_rpc() and ('LLAMAFILE = 1' in info) == bool($want_llamafile) else 1)"
built_right() { python -c "$check" 2>/dev/null; }

built_right && exit 0
version="$(python -c "import importlib.metadata as m; print(m.version('llama_cpp_python'))")"
echo "llama-cpp-python $version was built without RPC or otherwise than $llamafile_flag: building it again" >&2
pip cache remove "llama_cpp_python-$version-*" >/dev/null 2>&1 || true
CMAKE_ARGS="${CMAKE_ARGS:+$CMAKE_ARGS }-DGGML_RPC=on $llamafile_flag" pip install --force-reinstall --no-deps "llama-cpp-python==$version"
built_right || { echo "llama-cpp-python still lacks RPC or is still built otherwise than $llamafile_flag" >&2; exit 1; }
