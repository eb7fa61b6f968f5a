"""`python -m chaosbench.report PATH...`: re-render reports.

PATH is a run directory (reports/<run-id>, holding result.json) or a reports folder (every run in
it is re-rendered). The index of each parent folder is rewritten. Exit 2 if any input was bad.
"""

import sys
from pathlib import Path

from . import ReportInputError, render_index, render_run


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m chaosbench.report RUN_DIR|REPORTS_DIR ...", file=sys.stderr)
        return 2
    bad, indexes = 0, set()
    for arg in map(Path, argv):
        runs = [arg] if (arg / "result.json").is_file() or not arg.is_dir() else \
            sorted(d for d in arg.iterdir() if (d / "result.json").is_file())
        if not runs:
            print(f"error: {arg}: no result.json here or in its subfolders; pass reports/<run-id> or reports/",
                  file=sys.stderr)
            bad += 1
        for run in runs:
            try:
                print(render_run(run))
                indexes.add(run.resolve().parent)
            except ReportInputError as exc:  # one broken run does not stop the others
                print(f"error: {exc}", file=sys.stderr)
                bad += 1
    for folder in sorted(indexes):
        print(render_index(folder))
    return 2 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
