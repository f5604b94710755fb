#!/usr/bin/env python3
"""Speculative vs target-only speed, side by side in one process: `localspec bench` as a script.

    python scripts/bench_speculative.py                      # demo pair, 14 prompts x 128 tokens, T=0 and T=0.8
    python scripts/bench_speculative.py --draft-max 6 --json
    python scripts/bench_speculative.py -p qwen2.5-7b --temperatures 0

Prints tokens/s for both sides, the speed-up, the acceptance rate and the mean
number of draft tokens kept per target pass, for each temperature. Same prompts
and seeds on both sides; `--help` lists every option.
"""

import sys

from localspec.cli import main

if __name__ == "__main__":
    main(["bench", *sys.argv[1:]], prog_name="scripts/bench_speculative.py bench")
