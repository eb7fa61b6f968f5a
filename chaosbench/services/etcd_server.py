"""A real etcd server as a subprocess: free ports, its own data dir, health wait, always stopped.

Started with ``--enable-v2`` so torchrun's own ``etcd`` / ``etcd-v2`` backends work against it
too, next to our v3 backend. ``start()`` after ``stop()``/``kill()`` restarts on the same data dir
and ports, which is how tests restart etcd "between rounds".
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from chaosbench.services.ports import free_ports, port_is_free

ETCD_BINARY = os.environ.get("CHAOSBENCH_ETCD_BINARY", "/usr/bin/etcd")


class EtcdError(RuntimeError):
    """etcd could not be started or did not become healthy."""


class EtcdServer:
    """``with EtcdServer(tmp_path / "etcd") as etcd: ... etcd.endpoint  # "127.0.0.1:PORT"``."""

    def __init__(self, data_dir: str | Path, host: str = "127.0.0.1", client_port: int | None = None,
                 peer_port: int | None = None, name: str = "chaosbench-etcd",
                 startup_timeout: float = 20.0, binary: str = ETCD_BINARY):
        self.data_dir = Path(data_dir)
        self.host = host
        spare = iter(free_ports(2, host))   # distinct, so client and peer never collide
        self.client_port = client_port or next(spare)
        self.peer_port = peer_port or next(spare)
        self.name = name
        self.startup_timeout = startup_timeout
        self.binary = binary
        self.proc: subprocess.Popen | None = None
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}.log"

    # -- addresses ---------------------------------------------------------------------------
    @property
    def _connect_host(self) -> str:
        # 0.0.0.0 is where we listen, not an address a client can dial.
        return "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host

    @property
    def endpoint(self) -> str:
        """``host:port`` as torchrun's ``--rdzv-endpoint`` wants it."""
        return f"{self._connect_host}:{self.client_port}"

    @property
    def url(self) -> str:
        return f"http://{self.endpoint}"

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> "EtcdServer":
        if self.running:
            return self
        if not Path(self.binary).exists() and shutil.which(self.binary) is None:
            raise EtcdError(f"etcd binary not found at {self.binary!r}: install Debian's etcd-server "
                            f"or set CHAOSBENCH_ETCD_BINARY")
        for port in (self.client_port, self.peer_port):
            # Otherwise the health check could be answered by whatever already listens there.
            if not port_is_free(self.host, port):
                raise EtcdError(f"cannot start etcd: port {port} on {self.host} is already in use")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        peer = f"http://{self._connect_host}:{self.peer_port}"
        cmd = [self.binary, "--name", self.name, "--data-dir", str(self.data_dir), "--enable-v2",
               "--listen-client-urls", f"http://{self.host}:{self.client_port}",
               "--advertise-client-urls", self.url,
               "--listen-peer-urls", f"http://{self.host}:{self.peer_port}",
               "--initial-advertise-peer-urls", peer,
               "--initial-cluster", f"{self.name}={peer}",
               "--initial-cluster-state", "new", "--log-level", "warn"]
        log = open(self.log_path, "ab")
        try:
            # Own session: a Ctrl-C aimed at the harness's process group must not hit etcd
            # before the harness has stopped what depends on it.
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            log.close()
        try:
            self.wait_healthy(self.startup_timeout)
        except BaseException:
            self.kill()
            raise
        return self

    def wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise EtcdError(f"etcd exited with code {self.proc.returncode} during start-up; "
                                f"see {self.log_path}:\n{self._log_tail()}")
            ok, last = self.health()
            if ok:
                return
            time.sleep(0.1)
        raise EtcdError(f"etcd at {self.url} not healthy after {timeout:.0f}s ({last}); "
                        f"see {self.log_path}:\n{self._log_tail()}")

    def health(self, timeout: float = 1.0) -> tuple[bool, str]:
        """(healthy, detail) from etcd's ``GET /health``."""
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=timeout) as resp:
                body = resp.read().decode(errors="replace")
            return '"true"' in body, body
        except (urllib.error.URLError, OSError) as exc:
            return False, str(exc)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL if etcd does not exit in time. Safe to call twice."""
        self._signal_and_reap(signal.SIGTERM, timeout)

    def kill(self) -> None:
        """SIGKILL: etcd dies without a clean shutdown (data dir kept)."""
        self._signal_and_reap(signal.SIGKILL, 5.0)

    def pause(self) -> None:
        """SIGSTOP: etcd keeps its sockets open but answers nothing (a hung etcd)."""
        self._require_running().send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._require_running().send_signal(signal.SIGCONT)

    def _require_running(self) -> subprocess.Popen:
        if not self.running:
            raise EtcdError("etcd is not running")
        return self.proc  # type: ignore[return-value]

    def _signal_and_reap(self, sig: int, timeout: float) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            try:
                proc.send_signal(signal.SIGCONT)   # a paused etcd cannot act on SIGTERM
                proc.send_signal(sig)
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
            except ProcessLookupError:
                pass
        self.proc = None

    def _log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> "EtcdServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def __del__(self):  # last resort; the context manager is the real guarantee
        try:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.kill()
        except Exception:
            pass
