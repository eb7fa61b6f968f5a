"""Clock faults' parts on a node: libfaketime preloaded into the node's training from its start, reading
its offset from a per-node control file the harness rewrites (clock_skew, chaosbench/faults/clocks.py).

Why this way (measured with Debian's libfaketime 0.9.10, the one in the node images and on the host):
- the control file (FAKETIME_TIMESTAMP_FILE) holds "+0 x1" until a fault; with FAKETIME_CACHE_DURATION=0 a
  running process sees a new offset within 1 s (it re-reads the file once the real clock's second has
  changed: 0.09-0.47 s measured), for ~0.6-0.9 us per time() call (57 ns without);
- FAKETIME_DONT_FAKE_MONOTONIC=1: an NTP step moves the wall clock, not CLOCK_MONOTONIC. Faking
  CLOCK_MONOTONIC too is not offered: libfaketime then makes it the (faked) wall clock, and Python 3.11's
  timed waits, whose deadlines go to the kernel's real monotonic clock, hang (Event().wait(0.2) never
  returned here);
- with it, libfaketime still rewrites clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)'s deadline and
  Python >= 3.11's time.sleep() fails with EINVAL (wolfcw/libfaketime#426): clockfix.c, preloaded first,
  hands those deadlines to the kernel unchanged. It is built here with the host's C compiler, into the
  checkout's build/ (the containers see the checkout at SOURCE_MOUNT).
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from chaosbench.cluster.node.scripts import Script

FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"   # MT: torch's threads read the clock too
SOURCE = Path(__file__).with_name("clockfix.c")
REPO = Path(__file__).resolve().parents[3]
SHIM_REL = "build/clockfix/libchaosbench_clockfix.so"   # under the checkout, as every node sees it
CLOCK_DIR_IN_NODE = "/chaosbench/clock"                  # docker: the node's control directory (a bind mount)
CONTROL = "faketime"                                     # the control file's name in it
# Always with a rate: libfaketime 0.9.10 keeps the last rate a running process read while the spec
# has none (measured: after "+0 x1.1", a plain "+0" went on drifting), so "x1" is what ends a drift.
NO_SKEW = "+0 x1"


def control_text(offset_s: float | None = None, drift_ppm: float | None = None) -> str:
    """libfaketime's relative spec: "+30 x1" / "-30 x1", or "+0 x1.0001" for a clock running drift_ppm fast
    (a rate scales each process's time since its start: a drift injected into a process that has run
    for T seconds moves its clock by T * drift_ppm / 1e6 at once)."""
    if drift_ppm is not None:
        return f"+0 x{1 + drift_ppm / 1e6:.9f}"
    return f"{offset_s or 0:+g} x1"


def preload_env(control_file: str, source_root: str) -> dict[str, str]:
    """The env that every process of a node's training carries when its scenario has a clock fault."""
    return {"LD_PRELOAD": f"{source_root}/{SHIM_REL} {FAKETIME_LIB}",
            "FAKETIME_TIMESTAMP_FILE": control_file,
            "FAKETIME_CACHE_DURATION": "0",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1"}


def build_shim() -> Path:
    """clockfix.c as a shared object under the checkout (rebuilt when the source is newer)."""
    out = REPO / SHIM_REL
    if out.exists() and out.stat().st_mtime >= SOURCE.stat().st_mtime:
        return out
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise RuntimeError("clock_skew needs a C compiler on the host (cc) to build its libfaketime fix "
                           f"({SOURCE.name}); install gcc")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".{os.getpid()}.tmp")
    proc = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(tmp), str(SOURCE), "-ldl"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"building {SOURCE.name} failed: {proc.stderr.strip()[-400:]}")
    os.replace(tmp, out)
    return out


def prepare(clock_dir: Path) -> Path:
    """The node's control directory on the host, its file holding "+0" unless a fault set it already
    (a node rewritten into a new compose file keeps its offset)."""
    clock_dir.mkdir(parents=True, exist_ok=True)
    path = clock_dir / CONTROL
    if not path.exists():
        write(path, NO_SKEW)
    return path


def write(path: Path, text: str) -> None:
    """Atomically: libfaketime re-reads the file on every call (cache 0), never a half-written one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text + "\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


# libfaketime 0.9.10 creates these in /dev/shm for every preloaded process whose env has no FAKETIME_SHARED
# (the root of each preloaded tree; its children share them) and leaves them behind
SHM_FILES = ("faketime_shm_%d", "sem.faketime_sem_%d")


def remove_shm(pid: int) -> None:
    """A preloaded tree's leftovers in the host's /dev/shm (local backend; a container's go with it)."""
    for f in SHM_FILES:
        Path("/dev/shm", f % pid).unlink(missing_ok=True)


# `<control file> <LD_PRELOAD>`: how far a fresh preloaded python's time.time() is from the real clock
# (the kernel's, by a raw clock_gettime syscall that libfaketime does not see), in seconds
SEEN_OFFSET = Script("clock_offset", "python", r'''
import ctypes, os, subprocess, sys
ctl, preload = sys.argv[1], sys.argv[2]
env = {k: v for k, v in os.environ.items() if not k.startswith('FAKETIME')}
env.update(LD_PRELOAD=preload, FAKETIME_TIMESTAMP_FILE=ctl, FAKETIME_CACHE_DURATION='0',
           FAKETIME_DONT_FAKE_MONOTONIC='1')
probe = ("import ctypes, os, time\n"
         "class TS(ctypes.Structure): _fields_ = [('s', ctypes.c_long), ('ns', ctypes.c_long)]\n"
         "ts = TS(); nr = {'x86_64': 228, 'aarch64': 113}[os.uname().machine]\n"
         "t = time.time(); ctypes.CDLL(None).syscall(nr, 0, ctypes.byref(ts))\n"
         "print(t - (ts.s + ts.ns / 1e9))")
p = subprocess.Popen([sys.executable, '-c', probe], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
stdout, stderr = p.communicate(timeout=30)
for f in ('faketime_shm_%d', 'sem.faketime_sem_%d'):   # SHM_FILES: the probe's own, ours to remove
    try:
        os.unlink('/dev/shm/' + f % p.pid)
    except OSError:
        pass
if p.returncode != 0:
    sys.exit('the preloaded probe failed: ' + stderr.strip()[-300:])
print(stdout.strip())
''')


def node_clock(run_dir: Path, node: str, dir_in_node: str | None, source_root: str) -> tuple[Path, dict[str, str]]:
    """The node's control file on the host (run_dir/clock/<node>/faketime, prepared) and its preload env;
    `dir_in_node`: where the node sees that directory (None: the host path itself)."""
    build_shim()
    host = prepare(Path(run_dir) / "clock" / node)
    return host, preload_env(f"{dir_in_node or host.parent}/{CONTROL}", source_root)
