"""From requirement specifiers to exact pins, and their wheels into the shared wheelhouse (host side).

`pip install --dry-run --report` on the host venv resolves the job's requirements against what is
already installed there, which is what the node image has (its deps layer is this venv's `pip freeze`):
torch and friends count as satisfied and only what is missing is pinned (name==version). Those pins
are then downloaded (`--no-deps`) into the wheelhouse the node image was built from, so a build or a
local install needs no index and a package downloaded once is never fetched again.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from chaosbench.cluster.errors import ClusterError


class PipFailed(ClusterError):
    """pip refused the requirements; the message names them, where they came from, and pip's own reason."""


def pip_reason(output: str) -> str:
    """pip's ERROR lines (they name the requirement it could not satisfy), else its last lines."""
    errors = [ln.strip() for ln in output.splitlines() if ln.strip().startswith("ERROR")]
    return " | ".join(errors[-3:] or [ln.strip() for ln in output.splitlines() if ln.strip()][-3:])


def failed(what: str, reqs: list[str], origin: str, output: str) -> PipFailed:
    return PipFailed(f"{what} the job's requirements ({', '.join(reqs)}; from {origin or 'the scenario'}): "
                     f"{pip_reason(output)}. Fix the name or version there (e.g. `pip index versions NAME` "
                     f"lists what the index has), or drop the requirement")


def fetch(reqs: list[str], wheelhouse: Path, origin: str = "", python: str = sys.executable) -> list[str]:
    """The pins (name==version, sorted) that installing `reqs` next to `python`'s packages would add, each
    one's wheel in `wheelhouse`. From the wheelhouse alone when it has them (no network: a prefetched
    set-up, a repeated build), else resolved on the index the host's pip is configured with and fetched."""
    if wheelhouse.is_dir():
        try:
            return _resolve(reqs, origin, python, ["--no-index", "--find-links", str(wheelhouse)])
        except PipFailed:
            pass   # something is not there yet: ask the index
    pins = _resolve(reqs, origin, python, [])
    fill(pins, wheelhouse, origin)
    return pins


def _resolve(reqs: list[str], origin: str, python: str, where: list[str]) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="cb-jobenv-resolve-") as tmp:
        report = Path(tmp) / "report.json"
        # --prefix: resolve as the real install does (into its own prefix, the venv's packages satisfied)
        cmd = [python, "-m", "pip", "install", "--dry-run", "--quiet", "--disable-pip-version-check", *where,
               "--report", str(report), "--prefix", str(Path(tmp) / "prefix"), *reqs]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if out.returncode != 0:
            raise failed("pip could not resolve", reqs, origin, out.stdout + out.stderr)
        data = json.loads(report.read_text())
    return sorted(f"{i['metadata']['name']}=={i['metadata']['version']}" for i in data.get("install", []))


def fill(pins: list[str], wheelhouse: Path, origin: str = "") -> None:
    """Every pin's wheel in `wheelhouse` (sdists built into wheels here, as the deps image's are)."""
    if not pins:
        return
    from chaosbench.cluster.docker import images   # the deps image's wheelhouse filler, shared
    with tempfile.TemporaryDirectory(prefix="cb-jobenv-pins-") as tmp:
        lock = Path(tmp) / "pins.txt"
        lock.write_text("".join(p + "\n" for p in pins))
        try:
            images._fill_wheelhouse(lock, wheelhouse)
        except ClusterError as exc:
            raise PipFailed(f"pip could not download the job's requirements ({', '.join(pins)}; from "
                            f"{origin or 'the scenario'}): {exc}") from None
