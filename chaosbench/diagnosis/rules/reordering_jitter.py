"""A packet fault whose jitter reordered the link failed its max_slowdown bound. netem's jitter, and
packet_fault's unless `keep_order`, gives every packet its own delay, so packets overtake each other;
TCP reads that as loss (spurious retransmits, a smaller window), and what it costs depends on the
node's congestion control. Evidence: the failed `max_slowdown:<fault>` check, the inject record
(jitter, no keep_order, the congestion control) and the node's TCP counters from injection to heal
(packet_fault's heal record `tcp`). Without counters that show reordering or spurious retransmits,
the rule says nothing: the slowdown may have another cause."""
from __future__ import annotations

from ..model import Evidence, Finding
from ..record import RunRecord

DOC = "docs/below-the-process.md"


def _int(d: dict, key: str) -> int:
    v = d.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def check(rec: RunRecord) -> list[Finding]:
    out = []
    heals = {r.get("id"): r for r in rec.faults_log if r.get("action") == "heal"}
    for inj in rec.faults_log:
        params = inj.get("params") if isinstance(inj.get("params"), dict) else {}
        fid = inj.get("id")
        if inj.get("fault") != "packet_fault" or inj.get("action") != "inject" or not params.get("jitter_ms") \
                or params.get("keep_order") or params.get("reorder_pct"):
            continue                                  # no jitter, kept order, or reordering asked for outright
        slow = rec.check(f"max_slowdown:{fid}")
        if not slow or slow.get("status") != "failed":
            continue
        heal = heals.get(fid) or {}
        tcp = (heal.get("params") or {}).get("tcp") if isinstance(heal.get("params"), dict) else None
        if not isinstance(tcp, dict):
            continue                                  # no counters: the reordering's effect is not shown
        reordered = _int(tcp, "reordering_seen_sack") + _int(tcp, "reordering_seen_timestamps")
        spurious = _int(tcp, "spurious_retransmits_dsack")
        if not reordered and not spurious:
            continue
        sent, resent = _int(tcp, "segments_sent"), _int(tcp, "segments_retransmitted")
        cc = params.get("tcp_congestion_control") or tcp.get("congestion_control") or "unknown"
        target = inj.get("target") or params.get("node")
        share = f", {100 * resent / sent:.1f} %" if sent else ""
        bound = str(slow.get("expected") or "?").rsplit("/", 1)[-1].strip()
        out.append(Finding(
            rule="reordering_jitter",
            title=f"{fid} (packet_fault on {target}): its {params.get('delay_ms') or 0:g} ± {params['jitter_ms']:g} ms "
                  "jitter gave each packet its own delay, so packets overtook each other and TCP took the "
                  f"reordering for loss ({resent} of {sent} segments retransmitted{share}; congestion control "
                  f"{cc}): x{slow.get('observed')} slower, bound x{bound}.",
            fix="where the story is a congested or slow link, keep the order: `keep_order: true` on the fault "
                "(a switch's queue never reorders a flow; netem: a pfifo under it); where reordering is the "
                f"point (multipath, a flapping route), give max_slowdown room for it on {cc}",
            effect="the tiny job under 50 ± 20 ms for 6 s was x2.68-2.86 slower with keep_order, against "
                   "x10.6-17.9 with reordering under bbr and x5.4-8.9 under cubic",
            evidence=[Evidence(text=f"packet_fault {fid} on {target}: delay {params.get('delay_ms')} ms, jitter "
                                    f"{params['jitter_ms']} ms, keep_order off; node congestion control {cc}",
                               source="faults.jsonl", ts=inj.get("ts")),
                      Evidence(text=f"the node's TCP from injection to heal: {sent} segments sent, {resent} "
                                    f"retransmitted, reordering seen {reordered} times, {spurious} retransmits "
                                    "the receiver reported as spurious (DSACK)",
                               source="faults.jsonl", ts=heal.get("ts")),
                      Evidence(text=f"max_slowdown:{fid} failed: {slow.get('reason')}", source="result.json")],
            severity="cause",
            measured=f"{DOC} (jitter that reorders, and jitter that keeps the order)"))
    return out
