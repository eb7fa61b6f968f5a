"""Event lines written after the evidence was collected are the teardown's doing, not the job's.

Where a backend's nodes write straight into the run directory (docker's bind mount, local processes),
the event files stay open while the cluster is torn down: removing node-0 first resets node-1's
collective, and node-1's worker writes a `fatal` into the very file the checks read (measured: a
fresh-clone CI's s3_outage failed `no_fatal` on a line stamped 0.47 s after the run stopped, written
while its containers were being removed). So collection records each file's size (`mark`) and, once
the cluster is down, everything past it moves to events-after-collection/ (`set_aside`): kept for
the reader, never judged. A line cut in half by the mark belongs to the later part.
"""
from __future__ import annotations

from pathlib import Path

LATE_DIR = "events-after-collection"


def mark(events_dir: Path) -> dict[str, int]:
    """{file name: size} of every *.jsonl in the run's events directory, now."""
    return {p.name: p.stat().st_size for p in sorted(Path(events_dir).glob("*.jsonl")) if p.is_file()}


def set_aside(run_dir: Path, marks: dict[str, int]) -> int:
    """Move what each events file gained after `marks` (and files created since) to LATE_DIR; returns
    the number of lines moved. Files are cut at the last complete line within their mark."""
    run_dir = Path(run_dir)
    moved = 0
    for path in sorted((run_dir / "events").glob("*.jsonl")):
        data = path.read_bytes()
        keep = min(marks.get(path.name, 0), len(data))
        keep = data.rfind(b"\n", 0, keep) + 1   # 0 when not one whole line was there at the mark
        if keep == len(data):
            continue
        late = run_dir / LATE_DIR
        late.mkdir(exist_ok=True)
        (late / path.name).write_bytes(data[keep:])
        moved += data[keep:].count(b"\n") + (not data.endswith(b"\n"))
        if path.name not in marks:   # begun after collection: nothing of it is judged
            path.unlink()
            continue
        with open(path, "r+b") as f:
            f.truncate(keep)
    return moved
