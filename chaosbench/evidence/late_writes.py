"""What nodes write after the evidence was collected is the teardown's doing, not the job's.

Where a backend's nodes write straight into the run directory (docker's bind-mounted events, the
local backend's events and logs), the files stay open while the cluster is torn down: removing
node-0 first resets node-1's collective, and node-1's worker writes a `fatal` into the very file the
checks read (measured: a fresh-clone CI's s3_outage failed `no_fatal` on a line stamped 0.47 s after
the run stopped, written while its containers were being removed). So collection records each
file's size (`mark`) and, once the cluster is down, everything past it moves to
after-collection/<events|logs>/ (`set_aside`): kept for the reader, never judged. A line cut in half
by the mark belongs to the later part; a file begun after the mark moves whole.
"""
from __future__ import annotations

from pathlib import Path

LATE_DIR = "after-collection"
WATCHED = {"events": "*.jsonl", "logs": "*.log"}   # run-dir folders nodes may write into, and their files


def mark(run_dir: Path) -> dict[str, int]:
    """{"events/<file>": size, "logs/<file>": size} of every watched file, now."""
    run_dir = Path(run_dir)
    return {f"{folder}/{p.name}": p.stat().st_size for folder, pattern in WATCHED.items()
            for p in sorted((run_dir / folder).glob(pattern)) if p.is_file()}


def set_aside(run_dir: Path, marks: dict[str, int]) -> int:
    """Move what each watched file gained after `marks` to LATE_DIR; returns the lines moved."""
    run_dir = Path(run_dir)
    moved = 0
    for folder, pattern in WATCHED.items():
        for path in sorted((run_dir / folder).glob(pattern)):
            key = f"{folder}/{path.name}"
            data = path.read_bytes()
            keep = data.rfind(b"\n", 0, min(marks.get(key, 0), len(data))) + 1   # whole lines only
            if keep == len(data):
                continue
            late = run_dir / LATE_DIR / folder
            late.mkdir(parents=True, exist_ok=True)
            (late / path.name).write_bytes(data[keep:])
            moved += data[keep:].count(b"\n") + (not data.endswith(b"\n"))
            if key not in marks:   # begun after collection: nothing of it is judged
                path.unlink()
                continue
            with open(path, "r+b") as f:
                f.truncate(keep)
    return moved
