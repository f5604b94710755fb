#!/usr/bin/env bash
# Build localspec's wheel, install it (not editable) in a fresh virtual environment outside the
# source tree, and run the built-in demo once: catches a package or data file missing from the
# wheel, which an editable install hides. llama-cpp-python comes from pip's wheel cache when an
# earlier install built it.
set -euo pipefail
cd "$(dirname "$0")/.."

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -m pip wheel --no-deps -q -w "$work/dist" .
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q "$(ls "$work"/dist/localspec-*.whl)[demo]"
cd "$work"  # away from the source tree, so nothing is imported from it
"$work/venv/bin/localspec" run --max-tokens 16 --seed 1 --stats "Say hello." >"$work/out.txt"
test -s "$work/out.txt" || { echo "the installed wheel's demo printed nothing" >&2; exit 1; }
echo "wheel install: demo ran ($(wc -c <"$work/out.txt") bytes of output)"
