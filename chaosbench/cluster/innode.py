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
