"""Ray's Jobs REST API on a head's dashboard (`http://<head>:8265`), in plain HTTP (urllib): the `ray`
package stays out of the harness's venv, so no JobSubmissionClient. What the address backend uses:

    GET  /api/version                          is it a Ray dashboard, which Ray
    GET  /api/packages/gcs/<name>              is this working_dir package there already (200 / 404)
    PUT  /api/packages/gcs/<name>              upload it (the zip's bytes)
    POST /api/jobs/                            submit: entrypoint, submission_id, runtime_env, metadata
    GET  /api/jobs/  and  /api/jobs/<id>       status: PENDING RUNNING STOPPED SUCCEEDED FAILED
    GET  /api/jobs/<id>/logs                   the driver's whole output so far
    POST /api/jobs/<id>/stop                   stop it (its actors and workers go with it)
    GET  /api/v0/logs?node_ip=..&glob=..       Ray's own log files on a node (the State API)
    GET  /api/v0/logs/file?node_ip=..&filename=..&lines=-1   one of them, whole

Every failure is a ClusterError that names the address and what to check.
"""
from __future__ import annotations

import hashlib
import io
import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

from chaosbench.cluster.errors import ClusterError

TERMINAL = ("STOPPED", "SUCCEEDED", "FAILED")
ADDRESS_FIX = ("set RAY_ADDRESS to the head's dashboard, e.g. http://ray-head.example:8265 (the Jobs API; "
               "not the GCS port 6379 nor a ray:// client address)")


def parse_address(text: str, where: str = "RAY_ADDRESS (environment)") -> str:
    """`http(s)://host:port` with nothing after it, normalised (no trailing slash); ClusterError otherwise."""
    raw = (text or "").strip()
    url = urllib.parse.urlsplit(raw)
    problem = None
    if url.scheme not in ("http", "https"):
        problem = f"{raw!r} is not an http(s):// URL"
    elif not url.hostname:
        problem = f"{raw!r} has no host"
    elif url.path not in ("", "/") or url.query or url.fragment:
        problem = f"{raw!r} has a path, query or fragment"
    else:
        try:
            url.port
        except ValueError:
            problem = f"{raw!r} has a bad port"
    if problem:
        raise ClusterError(f"{where}: {problem}; {ADDRESS_FIX}")
    return f"{url.scheme}://{url.netloc}"


def package(files: dict[str, Path | bytes]) -> tuple[str, bytes]:
    """(gcs:// URI, zip bytes) of a working_dir: `files` maps the path inside it to a file or its bytes.
    Deterministic (sorted, fixed times), so the same files give the same URI and upload once."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name in sorted(files):
            src = files[name]
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, src if isinstance(src, bytes) else Path(src).read_bytes())
    data = buf.getvalue()
    return f"gcs://_ray_pkg_{hashlib.sha1(data).hexdigest()[:16]}.zip", data


class JobsClient:
    def __init__(self, address: str, timeout_s: float = 30):
        self.address, self.timeout_s = parse_address(address), timeout_s

    def _call(self, method: str, path: str, body: bytes | dict | None = None, ok404: bool = False,
              raw_text: bool = False):
        data = json.dumps(body).encode() if isinstance(body, dict) else body
        req = urllib.request.Request(self.address + path, data=data, method=method)
        if isinstance(body, dict):
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            if ok404 and e.code == 404:
                return None
            detail = e.read().decode(errors="replace").strip()[-800:]
            raise ClusterError(f"Ray Jobs API {method} {self.address}{path}: HTTP {e.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise ClusterError(f"Ray Jobs API {method} {self.address}{path}: {reason}; is the head's dashboard up "
                               f"and reachable from here ({ADDRESS_FIX})?") from None
        if raw_text:
            return raw.decode(errors="replace")
        try:
            return json.loads(raw) if raw else {}
        except ValueError:
            raise ClusterError(f"Ray Jobs API {method} {self.address}{path}: not JSON ({raw[:200]!r}): is "
                               f"{self.address} a Ray dashboard? {ADDRESS_FIX}") from None

    def version(self) -> dict:
        return self._call("GET", "/api/version")

    def upload(self, uri: str, data: bytes) -> bool:
        """Upload a working_dir package unless the cluster has it; True when it was uploaded."""
        path = "/api/packages/" + uri.replace("://", "/", 1)
        if self._call("GET", path, ok404=True) is not None:
            return False
        self._call("PUT", path, data)
        return True

    def submit(self, entrypoint: str, submission_id: str, runtime_env: dict, metadata: dict) -> str:
        out = self._call("POST", "/api/jobs/", {"entrypoint": entrypoint, "submission_id": submission_id,
                                                "runtime_env": runtime_env, "metadata": metadata})
        return out.get("submission_id") or out.get("job_id") or submission_id

    def status(self, job: str) -> dict:
        """The job's details (`status`, `message`, `metadata`, ...)."""
        return self._call("GET", f"/api/jobs/{urllib.parse.quote(job)}")

    def jobs(self) -> list[dict]:
        return self._call("GET", "/api/jobs/")

    def logs(self, job: str) -> str:
        return self._call("GET", f"/api/jobs/{urllib.parse.quote(job)}/logs").get("logs", "")

    def stop(self, job: str) -> bool:
        return bool(self._call("POST", f"/api/jobs/{urllib.parse.quote(job)}/stop").get("stopped"))

    def log_files(self, node_ip: str, glob: str = "*") -> list[str]:
        """Ray's log files on the node at `node_ip` (names relative to its logs directory)."""
        q = urllib.parse.urlencode({"node_ip": node_ip, "glob": glob})
        found = (self._call("GET", f"/api/v0/logs?{q}").get("data") or {}).get("result") or {}
        return sorted({f for files in found.values() for f in files if not f.endswith("/")})

    def log_file(self, node_ip: str, filename: str) -> str:
        q = urllib.parse.urlencode({"node_ip": node_ip, "filename": filename, "lines": -1})
        return self._call("GET", f"/api/v0/logs/file?{q}", raw_text=True)

    def wait(self, job: str, within_s: float, poll_s: float = 0.25) -> dict:
        """The job's details once it has ended; ClusterError (the job stopped) when it outlives `within_s`."""
        deadline = time.monotonic() + within_s
        while True:
            info = self.status(job)
            if info.get("status") in TERMINAL:
                return info
            if time.monotonic() > deadline:
                self.stop(job)
                raise ClusterError(f"Ray job {job} did not end within {within_s:g}s (status {info.get('status')}: "
                                   f"{info.get('message', '')}); stopped it")
            time.sleep(poll_s)


_ID = re.compile(r"[^A-Za-z0-9_.-]+")


def submission_id(*parts: str) -> str:
    """A submission id from words (the run id, a suffix): Ray keeps ids as given; keep them URL-safe."""
    return _ID.sub("-", "-".join(parts))
