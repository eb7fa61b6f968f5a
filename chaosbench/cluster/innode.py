"""Commands that run inside one node, written once for every backend.

Each backend ships a `Script` with its own transport (Cluster._run_in_node: `docker exec`, a local
subprocess, an `srun --overlap` step); the fault primitives in base.py are built on these. A new
in-node primitive is a script here plus one base method.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

FILL_FILE = ".chaosbench-fill"   # fill_nvme's ballast on a node's NVMe (never a checkpoint); also base.FILL_FILE
CHAIN = "CHAOSBENCH"   # our iptables chain; hooked into INPUT and OUTPUT while a node is cut


@dataclass(frozen=True)
class Script:
    name: str
    interpreter: str    # "python" | "sh"
    source: str

    def argv(self, python: str, *args: str) -> list[str]:
        """The command line on the node; `python` is the node's interpreter."""
        if self.interpreter == "python":
            return [python, "-c", self.source, *args]
        return ["sh", "-c", self.source, self.name, *args]


# `workers <SIG> <LOCAL_RANK> [KEY=VALUE ...]`: signal one rank's worker subtree, print its pids
PROCS = Script("procs", "python", (Path(__file__).with_name("innode_procs.py")).read_text())

# `<dir> <percent> [<root>]`: fill dir's filesystem to percent with FILL_FILE; with <root>, refuse
# unless <root> is its own filesystem (filling the node's root filesystem would take the node down)
FILL = Script("fill", "python", f"""
import os, sys
path, pct = sys.argv[1], float(sys.argv[2])
if len(sys.argv) > 3 and os.stat(sys.argv[3]).st_dev == os.stat('/').st_dev:
    sys.exit('node-local scratch is not its own filesystem: filling it fills the node')
st = os.statvfs(path); total = st.f_blocks * st.f_frsize
need = int(total * pct / 100) - (total - st.f_bavail * st.f_frsize)
chunk = b'\\0' * (1 << 20)
try:   # unbuffered, so ENOSPC surfaces here and not in close(): a full disk is the point
    with open(os.path.join(path, {FILL_FILE!r}), 'ab', buffering=0) as f:
        while need > 0:
            need -= f.write(chunk[:min(len(chunk), need)])
        os.fsync(f.fileno())
except OSError as exc:
    if exc.errno != 28:
        raise
""")

# `<dir>`: remove FILL's ballast
FREE = Script("free", "sh", f'rm -f "$1/{FILL_FILE}"')

# `<path> ...`: remove each (a dead node's memory tier)
REMOVE = Script("remove", "sh", 'rm -rf "$@"')

# `<dir> ...`: empty each directory, keep it
EMPTY = Script("empty", "sh", 'for d in "$@"; do rm -rf "$d"; mkdir -p "$d"; done')


def cut(actions: list[str]) -> Script:
    """`<host or ip> ...`: append `actions` (e.g. `-j DROP`) for each address of each host, both ways,
    to our chain, hooked into INPUT and OUTPUT."""
    per_ip = "; ".join(f'iptables -A {CHAIN} -{d} "$ip" {a}' for a in actions for d in ("s", "d"))
    return Script("cut", "sh", "\n".join([
        "set -e", f"iptables -N {CHAIN} 2>/dev/null || true",
        f"iptables -C INPUT -j {CHAIN} 2>/dev/null || iptables -I INPUT -j {CHAIN}",
        f"iptables -C OUTPUT -j {CHAIN} 2>/dev/null || iptables -I OUTPUT -j {CHAIN}",
        'for h in "$@"; do for ip in $(getent ahostsv4 "$h" | cut -d" " -f1 | sort -u); do '
        f'{per_ip}; done; done']))


DROP = ["-j DROP"]                                                # silent: packets vanish
REJECT = ["-p tcp -j REJECT --reject-with tcp-reset", "-j REJECT"]  # loud: connections fail at once

# no arguments: remove our chain entirely (idempotent; fails only if the chain is still there). A
# host that outlives the run (Slurm) runs it at heal, teardown and the sweep of a dead harness's job.
HEAL = Script("heal", "sh", (f"iptables -D INPUT -j {CHAIN} 2>/dev/null; iptables -D OUTPUT -j {CHAIN} 2>/dev/null; "
                             f"iptables -F {CHAIN} 2>/dev/null; iptables -X {CHAIN} 2>/dev/null; "
                             f"! iptables -n -L {CHAIN} >/dev/null 2>&1"))

# -- degraded links (packet_fault): loss in our own chain, rate/netem under our own root qdisc --------
LINK_CHAIN = "CHAOSBENCH-LINK"   # apart from CHAIN: healing a partition must not drop a degraded link's rules
LINK_QDISC = "1cb:"              # our htb root on the node's interface; class 1cb:10 carries the degraded traffic
_TARGET = 'ip=${t%%:*}; port=; case $t in *:*) port=${t#*:};; esac'

# `<dev> <loss probability|-> <rate kbit|-> <netem args|-> <ip[:tcp port]> ...`: drop that share of packets
# to and from each target (iptables statistic, both ways); shape what the node sends them (htb class +
# u32 filters), with a netem leaf under that class when netem args are given
DEGRADE_LINK = Script("degrade_link", "sh", "\n".join([
    "set -e", 'dev=$1 p=$2 rate=$3 netem=$4; shift 4',
    'if [ "$p" != - ]; then',
    f"  iptables -N {LINK_CHAIN} 2>/dev/null || true",
    f"  iptables -C INPUT -j {LINK_CHAIN} 2>/dev/null || iptables -I INPUT -j {LINK_CHAIN}",
    f"  iptables -C OUTPUT -j {LINK_CHAIN} 2>/dev/null || iptables -I OUTPUT -j {LINK_CHAIN}",
    '  for t in "$@"; do ' + _TARGET + '; st="-m statistic --mode random --probability $p -j DROP"',
    f'    if [ -n "$port" ]; then iptables -A {LINK_CHAIN} -d "$ip" -p tcp --dport "$port" $st; '
    f'iptables -A {LINK_CHAIN} -s "$ip" -p tcp --sport "$port" $st;',
    f'    else iptables -A {LINK_CHAIN} -d "$ip" $st; iptables -A {LINK_CHAIN} -s "$ip" $st; fi; done',
    'fi',
    'if [ "$rate" != - ] || [ "$netem" != - ]; then',
    '  r=10gbit; [ "$rate" = - ] || r=${rate}kbit',
    f'  tc qdisc add dev "$dev" root handle {LINK_QDISC} htb default 1',
    f'  tc class add dev "$dev" parent {LINK_QDISC} classid {LINK_QDISC}1 htb rate 10gbit',
    f'  tc class add dev "$dev" parent {LINK_QDISC} classid {LINK_QDISC}10 htb rate "$r" ceil "$r"',
    f'  [ "$netem" = - ] || tc qdisc add dev "$dev" parent {LINK_QDISC}10 handle 10cb: netem $netem',
    '  for t in "$@"; do ' + _TARGET + '; m="match ip dst $ip/32"; [ -z "$port" ] || m="$m match ip dport $port 0xffff"',
    f'    tc filter add dev "$dev" parent {LINK_QDISC} protocol ip prio 1 u32 $m flowid {LINK_QDISC}10; done',
    'fi']))

# `<dev>`: what of ours is on the node (empty: nothing); RESTORE_LINK's check and the tests'
LINK_LEFT = (f'{{ iptables -S 2>/dev/null | grep -e "{LINK_CHAIN}" || true; '
             f'tc qdisc show dev "$1" 2>/dev/null | grep -e " {LINK_QDISC} " -e " 10cb: " || true; }}')
LINK_STATE = Script("link_state", "sh", LINK_LEFT)

# `<dev>`: remove our chain and root qdisc, then verify nothing of ours is left (else fail, naming it)
RESTORE_LINK = Script("restore_link", "sh", "\n".join([
    f"iptables -D INPUT -j {LINK_CHAIN} 2>/dev/null; iptables -D OUTPUT -j {LINK_CHAIN} 2>/dev/null",
    f"iptables -F {LINK_CHAIN} 2>/dev/null; iptables -X {LINK_CHAIN} 2>/dev/null",
    f'if tc qdisc show dev "$1" | grep -q " {LINK_QDISC} root"; then tc qdisc del dev "$1" root; fi',
    f'left=$({LINK_LEFT})',
    '[ -z "$left" ] || { echo "degraded link not restored, still there: $left" >&2; exit 1; }']))


def kernel_has_netem() -> bool:
    """Whether this host's kernel offers sch_netem (docker nodes share it): built in, loaded, or a module."""
    import gzip
    import os
    if Path("/sys/module/sch_netem").exists():
        return True
    try:
        config = gzip.open("/proc/config.gz", "rt").read()
    except OSError:
        config = ""
    if "CONFIG_NET_SCH_NETEM=y" in config:
        return True
    mods = Path("/lib/modules") / os.uname().release
    return any(mods.rglob("sch_netem.ko*")) if mods.is_dir() and "NETEM is not set" not in config else False
