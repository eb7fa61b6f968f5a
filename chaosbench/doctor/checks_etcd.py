"""etcd: health, version, v2 API (torchrun's etcd backends need it), stale rendezvous state of the run id.

Talks plain HTTP (the /health, /version, /v2 and /v3 JSON gateway endpoints) so it needs no client library
and shows exactly what `curl` would.
"""
from __future__ import annotations

import base64
import os

import requests

from .result import CheckResult, Status
from .target import Target

V2_BACKENDS = ("etcd", "etcd-v2")
TIMEOUT = 2.0


def _b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


def v3_keys_mentioning(base: str, needle: str, limit: int = 5000) -> list[str]:
    """All keys (keys only) whose name contains `needle`, via the v3 JSON gateway."""
    body = {"key": _b64("\0"), "range_end": _b64("\0"), "keys_only": True, "limit": limit}
    r = requests.post(f"{base}/v3/kv/range", json=body, timeout=TIMEOUT)
    r.raise_for_status()
    keys = [base64.b64decode(kv["key"]).decode(errors="replace") for kv in r.json().get("kvs", [])]
    return sorted(k for k in keys if needle in k)


def v2_keys_mentioning(base: str, needle: str) -> list[str]:
    """Every v2 key or directory whose path contains `needle` (covers torchrun's etcd and etcd-v2 layouts)."""
    r = requests.get(f"{base}/v2/keys/", params={"recursive": "true"}, timeout=TIMEOUT)
    if r.status_code == 404:
        return []
    r.raise_for_status()
    out, stack = [], [r.json().get("node", {})]
    while stack:
        n = stack.pop()
        out.append(n.get("key", ""))
        stack.extend(n.get("nodes", []) or [])
    return sorted(k for k in out if needle in k)


STALE_AFTER_S = 60.0


def run_info(host: str, run_id: str) -> dict | None:
    """Keys and liveness of `run_id` via chaosbench.etcd (heartbeats, closed flag); None if unavailable."""
    os.environ.setdefault("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "python")   # etcd3 0.12 needs it
    try:
        from chaosbench import etcd as cb_etcd
        return {"keys": cb_etcd.list_keys(host, run_id, timeout=TIMEOUT),
                "runs": [r for r in cb_etcd.runs(host, timeout=TIMEOUT) if r.run_id == run_id]}
    except Exception:  # the plain HTTP listing above still answers; this only adds detail
        return None


def etcd_checks(t: Target) -> list[CheckResult]:
    if not t.etcd_endpoint:
        return [CheckResult("etcd", Status.SKIP, "no etcd endpoint in this setup (rendezvous "
                            f"{t.rendezvous or 'unknown'}); pass --etcd URL to check one")]
    base = t.etcd_endpoint.rstrip("/")
    if "://" not in base:
        base = "http://" + base
    results = []
    try:
        r = requests.get(f"{base}/health", timeout=TIMEOUT)
        try:   # etcd 3.4 answers JSON with Content-Type text/plain
            health = r.json()
        except ValueError:
            health = {}
        ok = str(health.get("health")).lower() == "true"
        results.append(CheckResult("etcd health", Status.PASS if ok else Status.FAIL,
                                   f"GET {base}/health -> {r.status_code} {r.text.strip()[:200]}",
                                   "" if ok else "etcd is up but unhealthy (no leader / quorum lost): check "
                                   "its log and `etcdctl endpoint status`"))
    except requests.RequestException as e:
        return [CheckResult("etcd health", Status.FAIL, f"GET {base}/health failed: {type(e).__name__}: {e}",
                            f"start etcd, or fix the endpoint ({base}); test with `curl {base}/health`")]
    try:
        v = requests.get(f"{base}/version", timeout=TIMEOUT).json()
        results.append(CheckResult("etcd version", Status.PASS,
                                   f"etcdserver {v.get('etcdserver')}, cluster {v.get('etcdcluster')}"))
    except (requests.RequestException, ValueError) as e:
        results.append(CheckResult("etcd version", Status.WARN, f"GET {base}/version failed: {e}"))
    v2_on = False
    try:
        r = requests.get(f"{base}/v2/keys/", timeout=TIMEOUT)
        v2_on = r.status_code == 200
        evidence = f"GET {base}/v2/keys/ -> {r.status_code}" + ("" if v2_on else f" ({r.text.strip()[:80]})")
    except requests.RequestException as e:
        evidence = f"GET {base}/v2/keys/ failed: {e}"
    needs_v2 = t.rendezvous in V2_BACKENDS
    if v2_on:
        results.append(CheckResult("etcd v2 API", Status.PASS, "v2 API enabled; " + evidence))
    elif needs_v2:
        results.append(CheckResult("etcd v2 API", Status.FAIL,
                                   f"rendezvous backend '{t.rendezvous}' needs etcd's v2 API, which is disabled; "
                                   + evidence,
                                   "start etcd with --enable-v2 (etcd <= 3.5; 3.6 removed v2), or use "
                                   "rendezvous etcd-v3 (chaosbench's v3 backend) or c10d"))
    else:
        results.append(CheckResult("etcd v2 API", Status.PASS if t.rendezvous else Status.WARN,
                                   f"v2 API disabled; fine for rendezvous {t.rendezvous or '(unknown)'}; {evidence}",
                                   "" if t.rendezvous else "torchrun's etcd/etcd-v2 backends would need --enable-v2"))
    results.append(_stale_state(base, t.run_id, v2_on))
    return results


def _stale_state(base: str, run_id: str | None, v2_on: bool) -> CheckResult:
    name = "etcd rendezvous state"
    if not run_id:
        return CheckResult(name, Status.SKIP, "no run id known; set CHAOSBENCH_RUN_ID or pass --run-id")
    try:
        v3 = v3_keys_mentioning(base, run_id)
        v2 = v2_keys_mentioning(base, run_id) if v2_on else []
    except (requests.RequestException, ValueError) as e:
        return CheckResult(name, Status.SKIP, f"could not list keys: {e}")
    host = base.split("://", 1)[1]
    # chaosbench.etcd imports torch (seconds): ask it only when there is state to judge
    info = run_info(host, run_id) if (v3 or v2) else None
    if info and info.get("keys"):   # chaosbench.etcd also finds torch's base64-named v2 store keys
        v2 = sorted(set(v2) | {k for k in info["keys"] if not k.startswith("/chaosbench/")} - set(v3))
    if not v3 and not v2:
        return CheckResult(name, Status.PASS, f"no rendezvous state for run id {run_id!r}")
    live = ""
    for r in (info or {}).get("runs", []):
        age = r.heartbeat_age_s
        live += (f"; {r.layout} state: closed={r.closed}, participants {r.participants}, last heartbeat "
                 + (f"{age:.0f} s ago" if age is not None else "unknown"))
        if age is not None and age < STALE_AFTER_S and not r.closed:
            return CheckResult(name, Status.WARN, f"a live job is using run id {run_id!r}{live}",
                               "if that job is not yours, pick another run id (two jobs with one id join "
                               "each other's rendezvous)", details={"v3_keys": v3, "v2_keys": v2})
    fixes = [f"python -m chaosbench.etcd clean --endpoint {host} --run-id {run_id}"]
    if v3:
        prefix = os.path.commonprefix(v3)
        fixes.append(f"ETCDCTL_API=3 etcdctl --endpoints={host} del --prefix '{prefix}'")
    if v2:
        top = min(v2, key=len)   # the run's directory; deleting it recursively removes the rest
        fixes.append(f"curl -X DELETE '{base}/v2/keys{top}?recursive=true'")
    shown = (v3 + v2)[:5]
    return CheckResult(name, Status.WARN,
                       f"{len(v3)} v3 and {len(v2)} v2 keys already exist for run id {run_id!r} "
                       f"(e.g. {', '.join(shown)}){live}: leftover state from an earlier run makes new nodes "
                       "join a stale round", "if no job with this run id is running, delete it: " + " or ".join(fixes)
                       + " — or use a fresh run id", details={"v3_keys": v3, "v2_keys": v2})
