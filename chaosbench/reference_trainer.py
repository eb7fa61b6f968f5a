"""What the harness knows of the reference trainer (trainer/), in one place.

The harness never imports trainer/: it launches it (`-m trainer.train --config ...`) and asks it
whether a config with a scenario's overrides is valid through its CLI (`python -m trainer.config
--check`), so trainer and harness meet only on the command line, in the events
(docs/events.md) and in the checkpoint manifest (docs/manifest.md).
"""
from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_CONFIG = "trainer/configs/tiny.yaml"   # the scenario's trainer.config when it names none
CHECK_TIMEOUT_S = 60


@dataclass(frozen=True)
class ConfigCheck:
    valid: bool
    config: dict = field(default_factory=dict)       # the merged config (defaults, file, overrides)
    errors: list[dict] = field(default_factory=list)  # {message, section, field, valid_options}
    warnings: list[str] = field(default_factory=list)


def check_config(path: str | Path, assignments: list[str]) -> ConfigCheck | None:
    """Validate `path` with `section.field=value` overrides by the trainer's own validator.
    None when the reference trainer is not installed (the cluster will then report its own errors);
    RuntimeError when the validator itself breaks (not an answer about the config). One process per
    question (~0.1 s): a scenario loaded again with the same file unchanged is answered from memory."""
    try:
        st = os.stat(path)
        stamp = (st.st_mtime_ns, st.st_size)
    except OSError:
        stamp = None   # the trainer names the missing file
    return _check(str(path), stamp, tuple(assignments))


@functools.lru_cache(maxsize=256)
def _check(path: str, stamp: tuple | None, assignments: tuple[str, ...]) -> ConfigCheck | None:
    cmd = [sys.executable, "-m", "trainer.config", "--check", path]
    for a in assignments:
        cmd += ["--set", a]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=CHECK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{' '.join(cmd[1:4])}: no answer within {CHECK_TIMEOUT_S} s") from None
    if proc.returncode not in (0, 2):
        if "No module named 'trainer'" in proc.stderr:
            return None
        tail = proc.stderr.strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
        raise RuntimeError(f"{' '.join(cmd[1:4])} failed: {tail[0]}")
    try:
        answer = json.loads(proc.stdout)
    except ValueError:
        raise RuntimeError(f"{' '.join(cmd[1:4])}: printed no JSON ({proc.stdout[:200]!r})") from None
    return ConfigCheck(valid=bool(answer.get("valid")), config=answer.get("config") or {},
                       errors=answer.get("errors") or [], warnings=answer.get("warnings") or [])
