"""Host facts: socket interfaces named by NCCL/Gloo variables, GPUs and driver, torch and NCCL versions."""
from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

from .result import CheckResult, Status
from .target import Target


def interfaces() -> list[str]:
    return sorted(name for _, name in socket.if_nameindex())


def matching_interfaces(spec: str, names: list[str], nccl: bool) -> list[str]:
    """NCCL: comma list of prefixes, '=' for exact names, leading '^' to exclude. Gloo: exact names."""
    if not nccl:
        return [n for n in names if n in spec.split(",")]
    exclude = spec.startswith("^")
    spec = spec.lstrip("^")
    exact = spec.startswith("=")
    pats = [p for p in spec.lstrip("=").split(",") if p]
    hit = {n for n in names for p in pats if (n == p if exact else n.startswith(p))}
    return sorted(set(names) - hit) if exclude else sorted(hit)


def interface_checks(t: Target) -> list[CheckResult]:
    names, results = interfaces(), []
    for var, nccl in (("NCCL_SOCKET_IFNAME", True), ("GLOO_SOCKET_IFNAME", False)):
        spec = t.env.get(var)
        if not spec:
            results.append(CheckResult(f"{var}", Status.PASS, f"unset: the library picks an interface "
                                       f"(available: {', '.join(names)})"))
            continue
        hits = matching_interfaces(spec, names, nccl)
        if hits:
            results.append(CheckResult(var, Status.PASS, f"{var}={spec} matches {', '.join(hits)}"))
        else:
            results.append(CheckResult(var, Status.FAIL, f"{var}={spec} matches no interface on this host "
                                       f"(available: {', '.join(names)})",
                                       f"set {var} to one of {', '.join(n for n in names if n != 'lo') or names}"
                                       " (the interface that carries traffic between nodes), or unset it"))
    return results


def gpu_check(t: Target, torch_mod=None) -> CheckResult:
    name = "gpu"
    driver = Path("/proc/driver/nvidia/version")
    drv = driver.read_text().splitlines()[0].strip() if driver.exists() else None
    smi = shutil.which("nvidia-smi")
    count = 0
    if torch_mod is not None:
        try:
            count = torch_mod.cuda.device_count()
        except Exception:
            count = 0
    evidence = f"driver: {drv or 'none'}; nvidia-smi: {smi or 'not found'}; torch sees {count} CUDA device(s)"
    if smi and count:
        try:
            out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10).stdout.strip()
            evidence += f"; {out.splitlines()[0] if out else ''}"
        except (OSError, subprocess.TimeoutExpired):
            pass
    if count:
        return CheckResult(name, Status.PASS, evidence)
    if not t.wants_gpu:
        return CheckResult(name, Status.PASS, evidence + " (not needed: the setup asks for no GPU; gloo on CPU)")
    fix = ("install the NVIDIA driver / expose the GPUs to the container (docker --gpus all, k8s "
           "nvidia.com/gpu limits)" if not drv else "driver present but torch sees no device: install a CUDA "
           "build of torch matching the driver, check CUDA_VISIBLE_DEVICES")
    return CheckResult(name, Status.FAIL, evidence + "; the setup asks for GPUs", fix)


def version_checks(t: Target) -> list[CheckResult]:
    try:
        import torch
    except ImportError as e:
        return [CheckResult("torch", Status.FAIL, f"cannot import torch: {e}", "pip install torch")]
    nccl = "n/a"
    try:
        if torch.cuda.is_available() or torch.version.cuda:
            v = torch.cuda.nccl.version()
            nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception as e:
        nccl = f"unavailable ({type(e).__name__})"
    dist = torch.distributed.is_available()
    backends = [b for b in ("gloo", "nccl") if dist and getattr(torch.distributed, f"is_{b}_available")()]
    r = CheckResult("torch / nccl", Status.PASS if dist else Status.FAIL,
                    f"torch {torch.__version__} (cuda {torch.version.cuda}), NCCL {nccl}, "
                    f"distributed backends: {', '.join(backends) or 'none'}",
                    "" if dist else "this torch build has no torch.distributed: install a standard build")
    return [r, gpu_check(t, torch)]


PACKET_MECHANISMS = {"iptables statistic": ("NETFILTER_XT_MATCH_STATISTIC",), "tbf": ("NET_SCH_TBF",),
                     "htb + u32": ("NET_SCH_HTB", "NET_CLS_U32"), "netem": ("NET_SCH_NETEM",),
                     "nfqueue": ("NETFILTER_NETLINK_QUEUE", "NETFILTER_XT_TARGET_NFQUEUE")}


def congestion_control() -> str | None:
    try:
        return open("/proc/sys/net/ipv4/tcp_congestion_control").read().strip() or None
    except OSError:
        return None


def packet_check(t: Target, config: str | None = None, cc: str | None = None) -> CheckResult:
    """Which of packet_fault's mechanisms this kernel offers (docker nodes share it): loss by iptables
    statistic, rate by htb, delay / jitter / duplicate / corrupt / reorder by netem, else by the in-node
    NFQUEUE handler (cluster/node/nfqueue.py); and the TCP congestion control docker nodes inherit
    (what reordering jitter costs depends on it)."""
    import gzip
    if config is None:
        try:
            config = gzip.open("/proc/config.gz", "rt").read()
        except OSError:
            return CheckResult("packet faults", Status.SKIP, "no /proc/config.gz: cannot tell which qdiscs and "
                               "iptables matches this kernel has; packet_fault fails at inject if one is missing")
    have = {name: all(f"CONFIG_{opt}=y" in config or f"CONFIG_{opt}=m" in config for opt in opts)
            for name, opts in PACKET_MECHANISMS.items()}
    evidence = "; ".join(f"{name}: {'yes' if ok else 'no'}" for name, ok in have.items())
    if not (have["iptables statistic"] and have["htb + u32"]):
        return CheckResult("packet faults", Status.WARN, evidence, "packet_fault's loss needs xt_statistic and its "
                           "rate htb + cls_u32 in the kernel")
    if not have["netem"] and not have["nfqueue"]:
        return CheckResult("packet faults", Status.PASS, evidence + " (loss_pct and rate_kbit work here; delay, jitter, "
                           "duplicate, corrupt and reorder need sch_netem or NFQUEUE and are refused up front)")
    via = "netem" if have["netem"] else "the NFQUEUE handler (no sch_netem)"
    cc = cc or congestion_control()
    return CheckResult("packet faults", Status.PASS, f"{evidence} (delay, jitter, duplicate, corrupt, reorder by {via})"
                       + (f"; TCP congestion control {cc}: docker nodes inherit it, and what jitter that reorders "
                          "costs depends on it (keep_order keeps the order; docs/below-the-process.md)" if cc else ""))
