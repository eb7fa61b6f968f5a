"""Event files of one host, streamed to stdout: how history leaves a node with no shared filesystem.

    python -m chaosbench.observer.stream DIR          # follow: every new complete line, as written
    python -m chaosbench.observer.stream --once DIR   # every complete line there is now, then exit

Each output line is `<file name>\\t<json line>` for the `*.jsonl` files of DIR (created if missing).
The Slurm backend runs it as its own `srun --overlap` step per host and appends what comes back to
the run's events directory, so triggers and progress work live; `--once` at collection makes the
copy whole. A torn last line (its writer killed mid-write) is held back until it is complete.
Stdlib only: it runs with the nodes' python and the chaosbench source on the path.
"""
from __future__ import annotations

import argparse
import os
import sys
import time


def complete_lines(path, offset: int) -> tuple[list[bytes], int]:
    """The complete lines of `path` after byte `offset`, and the offset after the last of them: a torn
    last line (its writer killed mid-write, or still writing) waits for its newline. The one reader of
    appended event files, here and in the harness's tail (tail.py)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            chunk = f.read()
    except OSError:
        return [], offset
    end = chunk.rfind(b"\n")
    if end < 0:
        return [], offset
    return chunk[:end].split(b"\n"), offset + end + 1


def stream(directory: str, once: bool, poll_s: float = 0.1, out=None) -> None:
    out = out or sys.stdout.buffer
    os.makedirs(directory, exist_ok=True)
    offsets: dict[str, int] = {}
    while True:
        for name in sorted(os.listdir(directory)):
            if not name.endswith(".jsonl"):
                continue
            lines, offsets[name] = complete_lines(os.path.join(directory, name), offsets.get(name, 0))
            for line in lines:
                if line.strip():
                    out.write(name.encode() + b"\t" + line + b"\n")
        out.flush()
        if once:
            return
        time.sleep(poll_s)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m chaosbench.observer.stream", description=__doc__.split("\n")[0])
    ap.add_argument("directory")
    ap.add_argument("--once", action="store_true", help="print what is there now and exit")
    args = ap.parse_args(argv)
    try:
        stream(args.directory, args.once)
    except (BrokenPipeError, KeyboardInterrupt):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
