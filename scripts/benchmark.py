"""Speed and memory of vit_keras beside its peers: the command line of the `benchmarking` package beside this file,
whose docstring (and `python scripts/benchmark.py --help`) describes the suites, the peers and the report.

    python scripts/benchmark.py                            # inference: batch 1 and 16, fp32 and bf16
    python scripts/benchmark.py --suite training           # fine-tune step: fp32 and bf16, XLA on and off
    python scripts/benchmark.py --quick                    # a tiny model: checks the script in seconds
"""

import sys

from benchmarking.cli import main

if __name__ == "__main__":
    sys.exit(main())
