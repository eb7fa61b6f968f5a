"""`python -m chaosbench.report PATH...`: re-render reports from what the analyse step wrote.

PATH is a run directory (reports/<run-id>, holding result.json: its report.html is re-rendered) or a
reports folder (every run in it is re-rendered, and the folder's index.html written). Nothing is
written beside a single run directory: the folder above it may not be a reports folder at all.
Exit 2 if any input was bad.
"""

import sys
from pathlib import Path

from . import ReportInputError, render_index, render_run


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m chaosbench.report RUN_DIR|REPORTS_DIR ...", file=sys.stderr)
        return 2
    bad, indexes = 0, []
    for arg in map(Path, argv):
        single = (arg / "result.json").is_file() or not arg.is_dir()
        runs = [arg] if single else sorted(d for d in arg.iterdir()
                                           if not d.is_symlink() and (d / "result.json").is_file())
        if not runs:
            print(f"error: {arg}: no result.json here or in its subfolders; pass reports/<run-id> or reports/",
                  file=sys.stderr)
            bad += 1
        elif not single:
            indexes.append(arg)
        for run in runs:
            try:
                print(render_run(run))
            except ReportInputError as exc:  # one broken run does not stop the others
                print(f"error: {exc}", file=sys.stderr)
                bad += 1
    for folder in indexes:
        print(render_index(folder))
    return 2 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
