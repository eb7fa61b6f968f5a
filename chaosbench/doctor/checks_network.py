"""Name resolution, TCP reachability (with timings and an optional readiness wait), ports in use."""
from __future__ import annotations

import socket
import time

from . import ports
from .result import CheckResult, Status
from .target import Target, split_hostport

DEFAULT_C10D_PORT = 29400


def resolve(host: str) -> tuple[list[str], float, str | None]:
    t0 = time.monotonic()
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        return sorted({i[4][0] for i in infos}), time.monotonic() - t0, None
    except socket.gaierror as e:
        return [], time.monotonic() - t0, str(e)


def connect(host: str, port: int, timeout: float = 2.0) -> tuple[bool, float, str | None]:
    t0 = time.monotonic()
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True, time.monotonic() - t0, None
    except OSError as e:
        return False, time.monotonic() - t0, e.strerror or str(e)


def endpoints(t: Target) -> list[tuple[str, str, int, bool]]:
    """(role, host, port, must_be_up) for every endpoint this setup depends on."""
    out = []
    env = t.env
    if env.get("MASTER_ADDR") and env.get("MASTER_PORT", "").isdigit():
        # inside a launched worker the master store must already listen
        out.append(("master", env["MASTER_ADDR"], int(env["MASTER_PORT"]), bool(env.get("RANK"))))
    if t.rdzv_endpoint and t.rendezvous not in ("etcd", "etcd-v2", "etcd-v3"):
        host, port = split_hostport(t.rdzv_endpoint, DEFAULT_C10D_PORT)
        out.append(("rendezvous", host, port, False))
    if t.etcd_endpoint:
        host, port = split_hostport(t.etcd_endpoint, 2379)
        out.append(("etcd", host, port, True))
    s3 = t.checkpoint.get("s3") or {}
    url = t.env.get("AWS_ENDPOINT_URL_S3") or t.env.get("AWS_ENDPOINT_URL") or s3.get("endpoint_url")
    if s3.get("enabled") and url:
        host, port = split_hostport(url, 443 if url.startswith("https") else 80)
        out.append(("s3", host, port, True))
    return out


def check_dns(role: str, host: str) -> CheckResult:
    ips, took, err = resolve(host)
    name = f"dns {role} {host}"
    if err:
        return CheckResult(name, Status.FAIL, f"cannot resolve {host!r}: {err} ({took * 1000:.0f} ms)",
                           f"fix the name (typo?), add it to /etc/hosts or DNS, or use an IP address", took)
    slow = took > 1.0
    return CheckResult(name, Status.WARN if slow else Status.PASS,
                       f"{host} -> {', '.join(ips)} in {took * 1000:.1f} ms",
                       "DNS takes over 1 s: every rendezvous round pays it; use /etc/hosts or IPs" if slow else "",
                       took)


def check_reachable(role: str, host: str, port: int, must_be_up: bool, wait_s: float = 0.0) -> CheckResult:
    name = f"tcp {role} {host}:{port}"
    deadline, tries = time.monotonic() + wait_s, 0
    t_start = time.monotonic()
    while True:
        tries += 1
        ok, took, err = connect(host, port)
        if ok or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    waited = time.monotonic() - t_start
    if ok:
        extra = f" (ready after {waited:.1f} s, {tries} tries)" if tries > 1 else ""
        return CheckResult(name, Status.PASS, f"connected in {took * 1000:.1f} ms{extra}", duration_s=waited)
    evidence = f"connect failed: {err} ({took * 1000:.0f} ms"
    evidence += f", still down after waiting {wait_s:.0f} s)" if wait_s else ")"
    if role == "master":
        fix = ("rank 0's torchrun agent hosts the store: check it is running and MASTER_ADDR names its host; "
               "open the port in the firewall; use --wait to give it time to start")
    elif role == "rendezvous":
        fix = ("the c10d store is hosted by the node whose address is --rdzv-endpoint; start that node first, "
               "or check address/port/firewall")
    elif role == "etcd":
        fix = f"start etcd or fix the endpoint; check with `curl http://{host}:{port}/health`"
    else:
        fix = f"check the S3 endpoint URL and that {host}:{port} is reachable from this host"
    return CheckResult(name, Status.FAIL if must_be_up else Status.WARN, evidence, fix, waited)


def check_port_free(role: str, host: str, port: int, ips: list[str]) -> CheckResult:
    """A port torchrun must bind on this host (master store, c10d store) must not be held by someone else."""
    name = f"port {role} {port}"
    local = [ip for ip in ips if ports.is_local_address(ip)]
    if not local:
        return CheckResult(name, Status.SKIP, f"{host} ({', '.join(ips) or 'unresolved'}) is not this host; "
                           "run the doctor on that host to check the port")
    holders = ports.port_holders(port)
    if not holders:
        return CheckResult(name, Status.PASS, f"nothing listens on {port} on this host")
    mine = ports.ancestors()
    others = [h for h in holders if h.pid not in mine]
    if not others:
        return CheckResult(name, Status.PASS, f"{port} is held by this process's own launcher: "
                           + ", ".join(h.describe() for h in holders))
    who = ", ".join(h.describe() for h in others)
    kill = " ".join(str(h.pid) for h in others if h.pid)
    return CheckResult(name, Status.FAIL, f"port {port} already in use by {who}",
                       (f"stop it (`kill {kill}`) if it is a leftover run, " if kill else "find it with `ss -ltnp`, ")
                       + f"or choose another port (--master-port / --rdzv-endpoint {host}:OTHER)",
                       details={"holders": [h.__dict__ for h in others]})


def network_checks(t: Target) -> list[CheckResult]:
    results = []
    for role, host, port, must in endpoints(t):
        dns = check_dns(role, host)
        results.append(dns)
        if dns.status == Status.FAIL:
            continue
        ips, _, _ = resolve(host)
        if role in ("master", "rendezvous") and not t.env.get("RANK"):
            # before launch: this host may be the one that must bind the port
            results.append(check_port_free(role, host, port, ips))
            if role == "rendezvous" or any(ports.is_local_address(ip) for ip in ips):
                continue
        results.append(check_reachable(role, host, port, must, t.wait_s if role == "master" else 0.0))
    return results
