"""Commands that run inside one node, written once for every backend.

Each backend ships a `Script` with its own transport (Cluster._run_in_node: `docker exec`, a local
subprocess, an `srun --overlap` step); the shared fault primitives (primitives/) are built on these. A new
in-node primitive is a script here plus one method in its family's module.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

FILL_FILE = ".chaosbench-fill"   # fill_nvme's ballast on a node's NVMe (never a checkpoint)
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
PROCS = Script("procs", "python", (Path(__file__).with_name("procs.py")).read_text())

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

# the NFQUEUE handler (nfqueue.py) that carries delay / jitter / duplicate / corrupt / reorder where
# the kernel has no sch_netem: its queue, its pid file on the node, the mark of the packets it sends
NFQUEUE_NUM = 459
NFQUEUE_PIDFILE = "/tmp/chaosbench-nfqueue.pid"
NFQUEUE_MARK = "0x1cb"
# `chaosbench-nfqueue <queue> <pidfile> <effects json>`: the handler (runs until SIGTERM)
NFQUEUE = Script("nfqueue", "python", (Path(__file__).with_name("nfqueue.py")).read_text())
# `<queue>`: exit 0 once a process has bound that queue in the node's network namespace
NFQUEUE_BOUND = Script("nfqueue_bound", "sh",
                       "awk -v q=\"$1\" '$1 == q {f = 1} END {exit !f}' /proc/net/netfilter/nfnetlink_queue")

# `<dev> <loss probability|-> <rate kbit|-> <netem args|-> <fifo|-> <nfqueue|-> <ip[:tcp port]> ...`: drop that
# share of packets to and from each target (iptables statistic, both ways); shape what the node sends them (htb
# class + u32 filters), with a netem leaf under that class when netem args are given (and under it a pfifo, with
# `fifo`: jitter that keeps the packets' order, netem's documented way); with a queue number, send what
# the node sends them (egress only, as netem) to that NFQUEUE, except what the handler sends itself (its mark);
# --queue-bypass: they pass untouched whenever no handler is bound
DEGRADE_LINK = Script("degrade_link", "sh", "\n".join([
    "set -e", 'dev=$1 p=$2 rate=$3 netem=$4 fifo=$5 q=$6; shift 6',
    'if [ "$p" != - ] || [ "$q" != - ]; then',
    f"  iptables -N {LINK_CHAIN} 2>/dev/null || true",
    f"  iptables -C INPUT -j {LINK_CHAIN} 2>/dev/null || iptables -I INPUT -j {LINK_CHAIN}",
    f"  iptables -C OUTPUT -j {LINK_CHAIN} 2>/dev/null || iptables -I OUTPUT -j {LINK_CHAIN}",
    'fi',
    'if [ "$p" != - ]; then',
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
    '  [ "$netem" = - ] || [ "$fifo" = - ] || tc qdisc add dev "$dev" parent 10cb:1 handle 11cb: pfifo limit 10000',
    '  for t in "$@"; do ' + _TARGET + '; m="match ip dst $ip/32"; [ -z "$port" ] || m="$m match ip dport $port 0xffff"',
    f'    tc filter add dev "$dev" parent {LINK_QDISC} protocol ip prio 1 u32 $m flowid {LINK_QDISC}10; done',
    'fi',
    'if [ "$q" != - ]; then',   # what the handler sends (delayed, corrupted, copies) passes our loss rules too
    f'  iptables -I {LINK_CHAIN} 1 -m mark --mark {NFQUEUE_MARK} -j RETURN',
    '  for t in "$@"; do ' + _TARGET + '; m="-d $ip"; [ -z "$port" ] || m="$m -p tcp --dport $port"',
    f'    iptables -A {LINK_CHAIN} $m -m mark ! --mark {NFQUEUE_MARK} -j NFQUEUE --queue-num "$q" --queue-bypass; done',
    'fi']))

# the node's TCP counters (its own network namespace: every TCP socket of the node's processes) and its
# congestion control (the host's default, which containers inherit): what a packet fault did to TCP
TCP_COUNTERS = Script("tcp_counters", "sh", 'cat /proc/net/snmp /proc/net/netstat; '
                                            'echo "Cc: $(cat /proc/sys/net/ipv4/tcp_congestion_control)"')

# `<dev>`: what of ours is on the node (empty: nothing); RESTORE_LINK's check and the tests'
_HANDLER = (f'pid=$(cat {NFQUEUE_PIDFILE} 2>/dev/null); [ -n "$pid" ] && '
            'tr "\\0" " " < /proc/$pid/cmdline 2>/dev/null | grep -q chaosbench-nfqueue')   # "$pid is our handler"
LINK_LEFT = (f'{{ iptables -S 2>/dev/null | grep -e "{LINK_CHAIN}" || true; '
             f'tc qdisc show dev "$1" 2>/dev/null | grep -e " {LINK_QDISC} " -e " 10cb: " || true; '
             f'awk \'$1 == {NFQUEUE_NUM} {{print "nfqueue {NFQUEUE_NUM} bound by netlink port " $2}}\' '
             '/proc/net/netfilter/nfnetlink_queue 2>/dev/null; '
             f'if {_HANDLER}; then echo "nfqueue handler pid $pid"; fi; }}')
LINK_STATE = Script("link_state", "sh", LINK_LEFT)

# `<dev>`: remove our chain and root qdisc, stop the NFQUEUE handler (SIGTERM: it lets what it holds go;
# SIGKILL after 5 s), then verify nothing of ours is left (else fail, naming it)
RESTORE_LINK = Script("restore_link", "sh", "\n".join([
    f"iptables -D INPUT -j {LINK_CHAIN} 2>/dev/null; iptables -D OUTPUT -j {LINK_CHAIN} 2>/dev/null",
    f"iptables -F {LINK_CHAIN} 2>/dev/null; iptables -X {LINK_CHAIN} 2>/dev/null",
    f'if tc qdisc show dev "$1" | grep -q " {LINK_QDISC} root"; then tc qdisc del dev "$1" root; fi',
    f'if {_HANDLER}; then kill "$pid"; i=0; while [ $i -lt 50 ] && kill -0 "$pid" 2>/dev/null; do sleep 0.1; '
    f'i=$((i+1)); done; kill -0 "$pid" 2>/dev/null && kill -9 "$pid"; sleep 0.2; fi; rm -f {NFQUEUE_PIDFILE}',
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


def kernel_has_nfqueue() -> bool:
    """Whether this host's kernel offers nfnetlink_queue and iptables' NFQUEUE target (the handler's way)."""
    import gzip
    try:
        config = gzip.open("/proc/config.gz", "rt").read()
    except OSError:   # no config to read: the queue's proc file says nfnetlink_queue is there
        return Path("/proc/net/netfilter/nfnetlink_queue").exists()
    return all(f"CONFIG_{opt}=y" in config or f"CONFIG_{opt}=m" in config
               for opt in ("NETFILTER_NETLINK_QUEUE", "NETFILTER_XT_TARGET_NFQUEUE"))


def netem_mechanism() -> str | None:
    """What carries delay / jitter / duplicate / corrupt / reorder on this host's kernel (docker nodes
    share it): 'netem' where it has sch_netem, else 'nfqueue' (nfqueue.py), else None."""
    return "netem" if kernel_has_netem() else "nfqueue" if kernel_has_nfqueue() else None


# -- name faults (dns_fault): the node's own resolver files, edited in place ---------------------------
# Docker bind-mounts /etc/hosts and /etc/resolv.conf into the container: they are rewritten in place
# (never renamed over, never the host's own files), with a backup under NAMES_DIR restored at heal.
NAMES_DIR = "/run/chaosbench-names"
BLACKHOLE = "192.0.2.1"   # TEST-NET-1: routed nowhere, so a connect to it times out

# `<host> <mode> <delay_s>`: make <host> fail to resolve on this node. wrong_address: a hosts entry
# (nsswitch `hosts: files dns`: files win). nxdomain | slow: resolv.conf points at a responder on
# 127.0.0.1:53 that answers NXDOMAIN for <host> (and <host>.<search domain>), or forwards its query
# to the original nameserver after <delay_s> (the answer arrives late); every other name is forwarded
# at once. Prints the responder's pid.
BREAK_NAME = Script("break_name", "python", r'''
import ipaddress, os, subprocess, sys, time
host, mode, delay = sys.argv[1].lower().rstrip('.'), sys.argv[2], float(sys.argv[3])
D = '/run/chaosbench-names'
os.makedirs(D, exist_ok=True)
for f in ('hosts', 'resolv.conf'):   # the first fault's backup is the original: keep it
    if not os.path.exists(f'{D}/{f}'):
        with open(f'/etc/{f}', 'rb') as src, open(f'{D}/{f}.tmp', 'wb') as dst:
            dst.write(src.read())
        os.replace(f'{D}/{f}.tmp', f'{D}/{f}')
def put(path, text):   # in place: the file is a bind mount, a rename over it fails (EBUSY)
    with open(path, 'w') as f:
        f.write(text)
if mode == 'wrong_address':
    with open('/etc/hosts') as f:
        text = f.read()
    put('/etc/hosts', text.rstrip('\n') + f'\n192.0.2.1\t{host}\t# chaosbench dns_fault\n')
    # the host's network may answer for TEST-NET-1 (measured here: refused at once): drop it in the node,
    # so a connect times out wherever it runs (an image without iptables keeps the host's behaviour)
    rule = ['OUTPUT', '-d', '192.0.2.1', '-j', 'DROP']
    try:
        if subprocess.run(['iptables', '-C', *rule], capture_output=True).returncode != 0:
            subprocess.run(['iptables', '-I', *rule], capture_output=True)
    except OSError:
        pass
    sys.exit(0)
orig = open(f'{D}/resolv.conf').read()
upstream = next((l.split()[1] for l in orig.splitlines() if l.startswith('nameserver')), '127.0.0.11')
if ipaddress.ip_address(upstream).is_loopback and upstream != '127.0.0.11':
    sys.exit(f'the node resolves through {upstream}: a responder on 127.0.0.1:53 would shadow it')
pidfile = f'{D}/responder.pid'
if os.path.exists(pidfile):
    sys.exit('a dns_fault responder already runs on this node: one nxdomain/slow name at a time')
p = subprocess.Popen([sys.executable, '-c', RESPONDER, host, mode, str(delay), upstream],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(f'{D}/responder.log', 'ab'),
                     start_new_session=True)
for _ in range(50):   # its socket is bound before resolv.conf points at it
    if os.path.exists(f'{D}/responder.ready') or p.poll() is not None:
        break
    time.sleep(0.1)
if p.poll() is not None or not os.path.exists(f'{D}/responder.ready'):
    sys.exit('the dns_fault responder did not start: ' + open(f'{D}/responder.log').read()[-300:])
open(pidfile, 'w').write(str(p.pid))
keep = [l for l in orig.splitlines() if l.startswith(('search', 'domain', 'options'))]   # ours last: it wins
timeout = max(5, min(30, int(delay) + 3))   # glibc's cap is 30 s: a late answer still counts
put('/etc/resolv.conf', '\n'.join(['# chaosbench dns_fault', 'nameserver 127.0.0.1', *keep,
                                   f'options timeout:{timeout} attempts:1']) + '\n')
print(p.pid)
'''.replace("RESPONDER", repr(r'''
import os, socket, sys, threading, time
host, mode, delay, upstream = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(('127.0.0.1', 53))
open('/run/chaosbench-names/responder.ready', 'w').close()
def qname(msg):
    i, labels = 12, []
    while msg[i]:
        labels.append(msg[i + 1:i + 1 + msg[i]].decode('ascii', 'replace')); i += 1 + msg[i]
    return '.'.join(labels).lower(), i + 5
def forward(msg, addr, wait):
    time.sleep(wait)
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(10)
    try:
        u.sendto(msg, (upstream, 53)); s.sendto(u.recv(4096), addr)
    except OSError:
        pass
    finally:
        u.close()
while True:
    msg, addr = s.recvfrom(4096)
    try:
        name, end = qname(msg)
    except (IndexError, ValueError):
        continue
    hit = name == host or name.startswith(host + '.')
    if hit and mode == 'nxdomain':   # QR, RD, RA, rcode 3 (NXDOMAIN); the question echoed
        s.sendto(msg[:2] + bytes([0x81 | (msg[2] & 1), 0x83]) + msg[4:6] + b'\0\0\0\0\0\0' + msg[12:end], addr)
    else:
        threading.Thread(target=forward, args=(msg, addr, delay if hit else 0), daemon=True).start()
'''), 1))

# no arguments: stop the responder, put back the backed-up files byte for byte, check them, drop the
# backup. Idempotent (no backup: nothing was broken). A removed container needs none of it.
RESTORE_NAMES = Script("restore_names", "python", r'''
import os, signal, sys
D = '/run/chaosbench-names'
try:
    os.kill(int(open(f'{D}/responder.pid').read()), signal.SIGKILL)
except (OSError, ValueError):
    pass
try:   # wrong_address's drop rule, however many were added
    import subprocess
    while subprocess.run(['iptables', '-D', 'OUTPUT', '-d', '192.0.2.1', '-j', 'DROP'], capture_output=True).returncode == 0:
        pass
except OSError:
    pass
bad = []
for f in ('hosts', 'resolv.conf'):
    if not os.path.exists(f'{D}/{f}'):
        continue
    want = open(f'{D}/{f}', 'rb').read()
    with open(f'/etc/{f}', 'wb') as out:
        out.write(want)
    if open(f'/etc/{f}', 'rb').read() != want:
        bad.append(f)
if bad:
    sys.exit('not restored: ' + ', '.join(bad))
for f in ('hosts', 'resolv.conf', 'responder.pid', 'responder.ready', 'responder.log'):
    try:
        os.unlink(f'{D}/{f}')
    except FileNotFoundError:
        pass
''')

# -- disk faults (disk_fault, lose_unsynced_writes): the FUSE layer over a node's tiers -------------------
# `control <tier> <fault json>` / `stats <tier>` / `mounts`: talk to the node's layer (disk_layer.py, which
# the node's command starts with `start` before its launcher)
DISK_LAYER = Script("disk_layer", "python", (Path(__file__).with_name("disk_layer.py")).read_text())
