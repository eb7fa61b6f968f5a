"""torchrun's default keep-alive (5 s x 3) and last call (30 s) dominating a recovery: the dead node
stays a participant until its keep-alive expires, then the round waits the last call for late nodes."""
from __future__ import annotations

from ..figures import measured
from ..model import Evidence, Finding
from ..record import RunRecord

DEFAULTS = {"keep_alive_interval": 5.0, "keep_alive_max_attempt": 3.0, "last_call_timeout": 30.0}
MIN_RDZV_S = 10.0          # below this the settings are not what a recovery waited on
LIVENESS = ("etcd-v3", "c10d-links")   # crash detection by links/leases: keep-alive expiry is not on the path


def _dict(v) -> dict:
    return v if isinstance(v, dict) else {}


def _settings(cfg: dict) -> dict[str, float]:
    conf = cfg.get("rdzv_configs") if isinstance(cfg.get("rdzv_configs"), dict) else {}
    out = {}
    for k, d in DEFAULTS.items():
        try:
            out[k] = float(conf.get(k, d))
        except (TypeError, ValueError):
            out[k] = d
    return out


def check(rec: RunRecord) -> list[Finding]:
    cfgs = rec.launch_configs
    if not cfgs:
        return []                                   # no launch-config line: the settings are unknown
    if rec.trainer.get("launcher") == "torchft":
        return []   # each group's torchrun is single-node: its rendezvous is never on a recovery's path
    node, cfg = sorted(cfgs.items())[0]
    backend = str(cfg.get("rdzv_backend") or "")
    s = _settings(cfg)
    ft = rec.trainer.get("launcher") == "ft_launcher"
    if ft:   # its c10d handler fixes the keep-alive in code (_ft_rendezvous.py): the conf's values are not read
        asked = _dict(_dict(rec.scenario.get("cluster")).get("rdzv_timeouts"))   # its launch-config line differs
        s.update(keep_alive_interval=5.0, keep_alive_max_attempt=3.0,
                 last_call_timeout=float(asked.get("last_call_timeout", DEFAULTS["last_call_timeout"])))
    wait_s = s["keep_alive_interval"] * s["keep_alive_max_attempt"] + s["last_call_timeout"]
    slow = [r for r in rec.recoveries if isinstance(r.get("rendezvous_s"), (int, float))
            and r["rendezvous_s"] >= MIN_RDZV_S and r["rendezvous_s"] >= 0.5 * (r.get("total_s") or 0)]
    if not slow or backend in LIVENESS and s["last_call_timeout"] < MIN_RDZV_S:
        return []
    if wait_s < MIN_RDZV_S:
        return []                                   # tuned settings: something else made rendezvous slow
    r = max(slow, key=lambda x: x["rendezvous_s"])
    line = cfg.get("_rdzv_line") or cfg.get("_line")
    ev = [Evidence(text=f"recovery from {r.get('fault_id')}: {r.get('total_s'):.1f} s in total, of which rendezvous "
                        f"{r['rendezvous_s']:.1f} s", source="result.json: recoveries", ts=r.get("rendezvous_done_at"))]
    if line is not None:
        ev.insert(0, line.evidence())
    set_here = [k for k in DEFAULTS if k in (cfg.get("rdzv_configs") or {})]
    defaults = [k for k in DEFAULTS if k not in set_here]
    what = (f"torchrun's default {', '.join(defaults)}" if defaults else "these rendezvous settings") + \
        f" (keep-alive {s['keep_alive_interval']:g} s x {s['keep_alive_max_attempt']:g}, last call " \
        f"{s['last_call_timeout']:g} s, rendezvous backend {backend or '?'})"
    fig = measured("crash", rec.result.get("backend"))
    if ft:
        what = (f"ft_launcher's keep-alive, fixed at 5 s x 3 in nvidia-resiliency-ext's c10d handler (last call "
                f"{s['last_call_timeout']:g} s)")
    return [Finding(
        rule="rdzv_keepalive_default",
        title=f"Rendezvous took {r['rendezvous_s']:.1f} s of a {r.get('total_s'):.1f} s recovery because of {what}: "
              "the dead node stays a participant until its keep-alive expires, then the round waits the last call.",
        fix=("ft_launcher accepts only c10d and reads no keep-alive setting, so a lost node costs its 15 s keep-alive: "
             "keep last_call_timeout low (cluster.rdzv_timeouts: {last_call_timeout: 1}), or compare torchrun "
             "with etcd-v3 (docs/frameworks.md)") if ft else
            "use chaosbench's etcd-v3 rendezvous (liveness leases and peer links) or c10d-links, with "
            "`--rdzv-conf keep_alive_interval=1,keep_alive_max_attempt=3,last_call_timeout=1` "
            "(in a scenario: cluster.rendezvous: etcd-v3, cluster.rdzv_timeouts: {keep_alive_interval: 1, "
            "keep_alive_max_attempt: 3, last_call_timeout: 1}); docs/recovery.md explains each setting",
        effect=(f"chaosbench's recommended setup recovers a node loss in {fig}" if fig else
                "a recovery without the keep-alive expiry and last-call wait (docs/recovery.md)"),
        evidence=ev, severity="warning", measured="docs/recovery.md" if fig else None)]
