"""Where a job tried to write, read from its error lines."""
from __future__ import annotations

import re

# "PermissionError: [Errno 13] Permission denied: 'snapshot.pt'", "OSError: [Errno 30] Read-only file system: 'x'",
# torch.save's "RuntimeError: Parent directory /nvme/checkpoints/run does not exist."
QUOTED = re.compile(r": '([^']+)'\s*$")
PARENT = re.compile(r"Parent directory (\S+?) does not exist")
READ_ONLY = re.compile(r"Read-only file system|Permission denied|\[Errno (30|13)\]")
MISSING = re.compile(r"Parent directory \S+ does not exist|No such file or directory|\[Errno 2\]")


def path_of(error: str) -> str | None:
    m = PARENT.search(error) or QUOTED.search(error)
    return m.group(1) if m else None
