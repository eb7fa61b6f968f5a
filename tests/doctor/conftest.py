import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import requests

from chaosbench.services.ports import free_port

REPO = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def etcd_process(tmp: Path, enable_v2: bool):
    """A real /usr/bin/etcd on free ports; always stopped. chaosbench's EtcdServer always enables v2,
    so the no-v2 case is started here."""
    if not Path("/usr/bin/etcd").exists():
        pytest.skip("etcd binary /usr/bin/etcd not installed (Debian etcd-server)")
    cport, pport = free_port(), free_port()
    cmd = ["/usr/bin/etcd", "--name", "doctor", "--data-dir", str(tmp / "etcd-data"),
           "--listen-client-urls", f"http://127.0.0.1:{cport}", "--advertise-client-urls", f"http://127.0.0.1:{cport}",
           "--listen-peer-urls", f"http://127.0.0.1:{pport}", "--initial-advertise-peer-urls",
           f"http://127.0.0.1:{pport}", "--initial-cluster", f"doctor=http://127.0.0.1:{pport}",
           "--log-level", "error"] + (["--enable-v2"] if enable_v2 else [])
    log = open(tmp / "etcd.log", "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{cport}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if requests.get(f"{url}/health", timeout=1).ok:
                    break
            except requests.RequestException:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"etcd did not start: {(tmp / 'etcd.log').read_text()[-2000:]}")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


@contextlib.contextmanager
def tmpfs(size: str, options: str = ""):
    """A size-limited tmpfs (really fills / really read-only), unmounted in finally. Needs root."""
    d = tempfile.mkdtemp(prefix="doctor-tmpfs-")
    opts = f"size={size}" + (f",{options}" if options else "")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", d], capture_output=True, text=True, timeout=10)
    if r.returncode:
        os.rmdir(d)
        pytest.skip(f"cannot mount a tmpfs here (needs root/CAP_SYS_ADMIN): {r.stderr.strip()}")
    try:
        yield Path(d)
    finally:
        subprocess.run(["umount", "-l", d], timeout=10)
        shutil.rmtree(d, ignore_errors=True)


def run_doctor(*args, env=None, timeout=120):
    """The CLI as users run it, in a fresh process."""
    e = dict(os.environ if env is None else env)
    e["PYTHONPATH"] = str(REPO)
    return subprocess.run([sys.executable, "-m", "chaosbench.doctor", *args], capture_output=True, text=True,
                          timeout=timeout, env=e, cwd=REPO)
