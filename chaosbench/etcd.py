"""Inspect and clean rendezvous state in etcd, for our v3 layout and torchrun's v2 layouts.

    python -m chaosbench.etcd list  --endpoint HOST:PORT [--run-id RUN] [--json]
    python -m chaosbench.etcd clean --endpoint HOST:PORT (--run-id RUN | --stale [--older-than S])

A run is *stale* when its rendezvous is closed, or when no node has sent a heartbeat for
``older_than`` seconds (a run whose nodes all died). v2 access uses etcd's plain HTTP v2 API, so
it needs no python-etcd; when etcd runs without --enable-v2 the v2 layout is simply skipped.
"""
from __future__ import annotations

import argparse
import base64
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass

from chaosbench.rendezvous.connection import EtcdV3Connection
from chaosbench.rendezvous.layout import (DEFAULT_V3_PREFIX, V2_LEGACY_PREFIX, V2_RDZV_PREFIX, V2_STORE_PREFIX,
                                          check_run_id,
                                          v3_run_prefix, v3_state_key)
from chaosbench.rendezvous.state import decode_state


@dataclass
class RunInfo:
    run_id: str
    layout: str                     # "v3" | "v2" (etcd-v2 backend) | "v2-legacy" (etcd backend)
    keys: int
    closed: bool | None
    participants: list[str]
    heartbeat_age_s: float | None   # None: unknown (no heartbeat recorded, or legacy layout)

    def stale(self, older_than: float) -> bool:
        return bool(self.closed) or (self.heartbeat_age_s is not None and self.heartbeat_age_s > older_than)


def _split(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"--endpoint {endpoint!r} must be HOST:PORT (etcd's client port, e.g. 127.0.0.1:2379)")
    return host, int(port)


def _v3(endpoint: str, timeout: float) -> EtcdV3Connection:
    host, port = _split(endpoint)
    conn = EtcdV3Connection(host, port, rpc_timeout=timeout, retry_timeout=timeout)
    conn.check()
    return conn


# -- v2 over plain HTTP --------------------------------------------------------------------------
def _v2(endpoint: str, path: str, method: str = "GET", timeout: float = 5.0, **query) -> dict | None:
    """One v2 request; None when the key (or the whole v2 API) is not there."""
    url = f"http://{endpoint}/v2/keys{urllib.parse.quote(path)}"
    if query:
        url += "?" + urllib.parse.urlencode(query)
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=timeout) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        if exc.code == 404:          # key not found, or etcd without --enable-v2
            return None
        raise


def _walk(node: dict):
    yield node
    for child in node.get("nodes", []):
        yield from _walk(child)


def _v2_store_keys(endpoint: str, run_id: str) -> list[str]:
    # The etcd-v2 store is shared by all runs; torch prefixes each key with
    # "torch.rendezvous.{run_id}.{round}/" before base64-encoding it.
    resp = _v2(endpoint, V2_STORE_PREFIX, recursive="true")
    if not resp:
        return []
    out = []
    for node in _walk(resp["node"]):
        name = node["key"].rsplit("/", 1)[-1]
        try:
            decoded = base64.b64decode(name).decode("utf-8", "replace")
        except ValueError:
            continue
        if decoded.startswith(f"torch.rendezvous.{run_id}."):
            out.append(node["key"])
    return out


def _v2_run_keys(endpoint: str, run_id: str) -> list[str]:
    keys = []
    for path in (f"{V2_RDZV_PREFIX}/{run_id}", f"{V2_LEGACY_PREFIX}/run_{run_id}"):
        resp = _v2(endpoint, path, recursive="true")
        keys += [n["key"] for n in _walk(resp["node"]) if not n.get("dir")] if resp else []
    return keys + _v2_store_keys(endpoint, run_id)


# -- public API ----------------------------------------------------------------------------------
def list_keys(endpoint: str, run_id: str, prefix: str = DEFAULT_V3_PREFIX, timeout: float = 5.0) -> list[str]:
    """Every etcd key (v3 and v2) holding rendezvous state of ``run_id``."""
    check_run_id(run_id)
    conn = _v3(endpoint, timeout)
    try:
        keys = [meta.key.decode() for _, meta in conn.client.get_prefix(v3_run_prefix(run_id, prefix), keys_only=True)]
    finally:
        conn.close()
    return sorted(keys) + sorted(_v2_run_keys(endpoint, run_id))


def delete_run(endpoint: str, run_id: str, prefix: str = DEFAULT_V3_PREFIX, timeout: float = 5.0) -> int:
    """Delete all rendezvous state of ``run_id``; returns how many keys went."""
    check_run_id(run_id)
    conn = _v3(endpoint, timeout)
    try:
        deleted = conn.client.delete_prefix(v3_run_prefix(run_id, prefix)).deleted
    finally:
        conn.close()
    v2_keys = _v2_run_keys(endpoint, run_id)
    for key in v2_keys:
        _v2(endpoint, key, method="DELETE", timeout=timeout)
    if _v2(endpoint, f"{V2_LEGACY_PREFIX}/run_{run_id}"):   # the legacy backend's now-empty directories
        _v2(endpoint, f"{V2_LEGACY_PREFIX}/run_{run_id}", method="DELETE", recursive="true", dir="true")
    return int(deleted) + len(v2_keys)


def runs(endpoint: str, prefix: str = DEFAULT_V3_PREFIX, timeout: float = 5.0) -> list[RunInfo]:
    """Every run with rendezvous state in etcd, with what its state says about liveness."""
    out: list[RunInfo] = []
    conn = _v3(endpoint, timeout)
    try:
        counts: dict[str, int] = {}
        base = prefix.rstrip("/") + "/"
        for _, meta in conn.client.get_prefix(base, keys_only=True):
            run_id = meta.key.decode()[len(base):].split("/", 1)[0]
            counts[run_id] = counts.get(run_id, 0) + 1
        for run_id, n in sorted(counts.items()):
            raw, _ = conn.client.get(v3_state_key(run_id, prefix))
            out.append(_info(run_id, "v3", n, raw))
    finally:
        conn.close()
    resp = _v2(endpoint, V2_RDZV_PREFIX, timeout=timeout)
    for node in (resp or {}).get("node", {}).get("nodes", []):
        if not node.get("dir"):
            run_id = node["key"].rsplit("/", 1)[-1]
            out.append(_info(run_id, "v2", len(_v2_run_keys(endpoint, run_id)), base64.b64decode(node["value"])))
    resp = _v2(endpoint, V2_LEGACY_PREFIX, timeout=timeout)
    for node in (resp or {}).get("node", {}).get("nodes", []):
        name = node["key"].rsplit("/", 1)[-1]
        if name.startswith("run_"):   # liveness lives in ephemeral keys we do not interpret
            out.append(RunInfo(name[4:], "v2-legacy", len(_v2_run_keys(endpoint, name[4:])), None, [], None))
    return out


def stale_runs(endpoint: str, older_than: float = 60.0, prefix: str = DEFAULT_V3_PREFIX) -> list[RunInfo]:
    return [r for r in runs(endpoint, prefix) if r.stale(older_than)]


def _info(run_id: str, layout: str, keys: int, raw: bytes | None) -> RunInfo:
    if raw is None:          # store keys without state: whatever wrote them is gone
        return RunInfo(run_id, layout, keys, None, [], None)
    try:
        s = decode_state(raw)
    except ValueError:
        return RunInfo(run_id, layout, keys, None, ["<undecodable state>"], None)
    return RunInfo(run_id, layout, keys, s.closed, s.participants, s.heartbeat_age_s())


# -- CLI -----------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m chaosbench.etcd", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("list", "clean"):
        s = sub.add_parser(name)
        s.add_argument("--endpoint", required=True, help="etcd client endpoint HOST:PORT")
        s.add_argument("--run-id", help="rendezvous id (torchrun --rdzv-id)")
        s.add_argument("--prefix", default=DEFAULT_V3_PREFIX, help="etcd-v3 key prefix (rdzv-conf key_prefix)")
        s.add_argument("--older-than", type=float, default=60.0, help="heartbeat age (s) that makes a run stale")
        s.add_argument("--json", action="store_true")
    sub.choices["clean"].add_argument("--stale", action="store_true", help="delete every stale run")
    args = p.parse_args(argv)
    try:
        if args.cmd == "list" and args.run_id:
            result: object = list_keys(args.endpoint, args.run_id, args.prefix)
        elif args.cmd == "list":
            result = [dict(asdict(r), stale=r.stale(args.older_than)) for r in runs(args.endpoint, args.prefix)]
        elif args.run_id:
            result = {"deleted": delete_run(args.endpoint, args.run_id, args.prefix)}
        elif args.stale:
            result = {r.run_id: delete_run(args.endpoint, r.run_id, args.prefix)
                      for r in stale_runs(args.endpoint, args.older_than, args.prefix)}
        else:
            p.error("clean needs --run-id RUN or --stale")
    except (ValueError, ConnectionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # RendezvousConnectionError and friends: say what, not a traceback
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 3
    if args.json or not isinstance(result, list):
        print(json.dumps(result, indent=2, default=str))
    else:
        for item in result:
            print(item if isinstance(item, str) else
                  f"{item['run_id']:<24} {item['layout']:<9} keys={item['keys']:<3} closed={item['closed']} "
                  f"heartbeat_age_s={item['heartbeat_age_s']} stale={item['stale']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
