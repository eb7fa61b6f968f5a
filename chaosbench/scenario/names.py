"""Scenario strings that end up in a path, a shell word, a container or docker argument, an iptables or
a torchrun argument: one place says what each may look like.

They are checked when the scenario loads (exit 2 with file:line, the field and the fix, like every
other scenario error); the sinks that build a path from one check again (`fault_file_name`), so a
fault that reaches them some other way still cannot write outside the run directory.
"""
from __future__ import annotations

import re

# a fault id names files (inventories/<id>.json) and log records; repetitions add '#N'
FAULT_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
FAULT_ID_FIX = ("use 1-64 characters from A-Z a-z 0-9 _ . - (not starting with . or -, no '..'), "
                "e.g. 'kill_n2'")
ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")              # `env K=V`, docker -e, os.environ
DOCKER_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}")  # a reference, never an option
PY_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
CONF_KEY = re.compile(r"[a-z_][a-z0-9_]{0,63}")                       # torchrun --rdzv-conf k=v,k=v
SLURM_NAME = re.compile(r"[A-Za-z0-9_.,:+-]{1,128}")                  # partition / account lists


# The run directory is <report-dir>/<name>-YYYYmmdd-HHMMSS-xxxx (runner.py): one component, which a
# file system takes up to 255 bytes long; the name leaves room for that suffix and for suffixes the
# backends add. Below it the record needs about RUN_DIR_DEPTH more bytes (inventories/<id>-N.json,
# late writes set aside under their own paths), all under PATH_MAX.
MAX_SCENARIO_NAME = 128
RUN_ID_SUFFIX = len("-20250101-120000-abcd")
RUN_DIR_DEPTH = 512
PATH_MAX = 4096


def run_dir_problem(report_dir, scenario_name: str) -> str | None:
    """Why reports/<run-id>/ for this scenario would be too long a path, or None."""
    import os
    base = os.path.abspath(os.fspath(report_dir))
    longest = len(os.fsencode(base)) + 1 + len(scenario_name) + RUN_ID_SUFFIX + RUN_DIR_DEPTH
    if longest <= PATH_MAX:
        return None
    return (f"--report-dir: the run directory {base}/{scenario_name}-<date>-<time>-<hex> leaves too little of the "
            f"{PATH_MAX}-byte path limit for the files of a run (about {RUN_DIR_DEPTH} bytes below it); "
            f"choose a shorter --report-dir or a shorter scenario name")


def fault_id_problem(fault_id: str) -> str | None:
    if FAULT_ID.fullmatch(fault_id) and ".." not in fault_id:
        return None
    return f"fault id {fault_id!r} is not a safe name: {FAULT_ID_FIX}"


def fault_file_name(fault_id: str, suffix: str = ".json") -> str:
    """`f1#2` -> `f1-2.json`; refuses anything that is not a plain file name (a path sink)."""
    base, _, rep = fault_id.partition("#")
    if fault_id_problem(base) or (rep and not rep.isdigit()):
        raise ValueError(f"fault id {fault_id!r} cannot name a file: {FAULT_ID_FIX}")
    return f"{base}-{rep}{suffix}" if rep else f"{base}{suffix}"


def bad(pattern: re.Pattern, value: str) -> bool:
    return not isinstance(value, str) or pattern.fullmatch(value) is None
