"""Drive Debian's headless chromium for report tests: dump the DOM, take a screenshot, collect console output.

Chromium prints every console message (log, warning, error, uncaught exception) as an
`INFO:CONSOLE` line on stderr with `--enable-logging=stderr --v=0`; levels are not told apart, and
the report logs nothing, so any such line counts as a console error.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CONSOLE = re.compile(r":CONSOLE[:(]\d+\)?\]\s*(.*)")
BASE_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
    "--enable-logging=stderr", "--v=0",
    # Any network request fails (and shows as a console error): proves the file is self-contained.
    "--host-resolver-rules=MAP * ~NOTFOUND",
]


def available() -> bool:
    return Path(CHROMIUM).exists() and os.access(CHROMIUM, os.X_OK)


def run(url: str, extra: list[str], profile: Path, timeout: float = 60) -> tuple[str, list[str]]:
    """Run chromium once; returns (stdout, console messages). The whole process group dies with it."""
    cmd = [CHROMIUM, *BASE_FLAGS, f"--user-data-dir={profile}", *extra, url]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # its zygote/renderer/gpu children share the group
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # leftover helpers, on success, timeout or Ctrl-C
        except ProcessLookupError:
            pass
        proc.wait()
    if proc.returncode != 0:
        raise RuntimeError(f"chromium exited {proc.returncode}: {err[-2000:]}")
    return out, [m.group(1) for m in map(CONSOLE.search, err.splitlines()) if m]


def page_requests(net_log: Path) -> list[str]:
    """Network URLs the page itself asked for, from chromium's --log-net-log.

    The browser's own background traffic (update checks, accounts) has the initiator
    "not an origin"; what a file:// page requests has the opaque origin "null".
    """
    events = json.loads(Path(net_log).read_text())["events"]
    urls = {e["params"]["url"] for e in events
            if "url" in e.get("params", {}) and e["params"].get("initiator", "not an origin") != "not an origin"}
    return sorted(u for u in urls if not u.startswith(("file:", "data:")))
