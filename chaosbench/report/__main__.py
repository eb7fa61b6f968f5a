"""`python -m chaosbench.report RUN_DIR...`: re-render reports (and the index of their parent)."""

import sys
from pathlib import Path

from . import ReportInputError, render_index, render_run


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m chaosbench.report RUN_DIR [RUN_DIR...]", file=sys.stderr)
        return 2
    try:
        for run_dir in argv:
            print(render_run(run_dir))
        for parent in sorted({Path(d).resolve().parent for d in argv}):
            print(render_index(parent))
    except ReportInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
