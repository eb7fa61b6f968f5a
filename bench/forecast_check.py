"""The forecast's three validations in one command (docs/plan-a-run.md).

    python bench/forecast_check.py [--goodput-json FILE --goodput-keep DIR]

(a) one tier, fixed costs, exponential failures: the simulated optimum interval within 5 % of Young/Daly;
(b) sanity check: the llama3-405b preset with published-order costs, 16,384 GPUs, 54 days: ETTR > 90 %;
(c) the simulator fed bench/goodput.py's cluster, fault rate and the recoveries of its kept faulty
    run predicts the goodput that bench measured within +-2 percentage points. It needs a finished
    `python bench/goodput.py --json FILE --keep DIR`; without one it is reported as not evaluated.

Exit 0 when every evaluated check passed and all three were evaluated; 1 otherwise.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from chaosbench.forecast.validate import run_all  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--goodput-json", type=Path, default=Path("reports/goodput-bench.json"),
                    help="bench/goodput.py --json output")
    ap.add_argument("--goodput-keep", type=Path, default=Path("reports/goodput-bench"),
                    help="bench/goodput.py --keep directory (holds faulty/)")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    checks = run_all(args.goodput_json, args.goodput_keep)
    for c in checks:
        verdict = {True: "PASS", False: "FAIL", None: "NOT EVALUATED"}[c.passed]
        print(f"{verdict:14s} {c.name}\n               {c.detail}")
    print(f"# {time.monotonic() - t0:.1f} s")
    return 0 if all(c.passed for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
