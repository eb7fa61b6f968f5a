"""`python -m chaosbench.proxy` as a process: config at start, binding, logs, signals."""
from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time

import pytest

from chaosbench.proxy import ProxyAPIError, ProxyClient

from .conftest import connect, roundtrip

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "chaosbench.proxy", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_api(client: ProxyClient, proc: subprocess.Popen) -> None:
    deadline = time.time() + 20
    while True:
        try:
            client.version()
            return
        except ProxyAPIError:
            if proc.poll() is not None or time.time() > deadline:
                raise AssertionError(f"proxy did not start: {proc.communicate(timeout=5)}")
            time.sleep(0.1)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_config_binding_and_clean_shutdown(tmp_path, echo, sig):
    api_port, listen_port = free_port(), free_port()
    cfg = tmp_path / "proxies.json"
    cfg.write_text(json.dumps([{"name": "echo", "listen": f"127.0.0.1:{listen_port}",
                                "upstream": echo.addr}]))
    proc = start("--host", "127.0.0.1", "--port", str(api_port), "--config", str(cfg))
    try:
        client = ProxyClient(f"http://127.0.0.1:{api_port}", timeout=2)
        wait_api(client, proc)
        assert client.get("echo").listen == f"127.0.0.1:{listen_port}"
        live = connect(listen_port)
        assert roundtrip(live)[0] == b"ping"
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=10)
        assert proc.returncode == 0, err
        assert "shutting down" in err and out == ""      # logs go to stderr
        live.settimeout(2)
        try:
            assert live.recv(10) == b""                   # open connections were closed
        except ConnectionResetError:
            pass
        live.close()
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", listen_port), timeout=1)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


@pytest.mark.parametrize("content,needle", [
    ("{not json", "is not valid JSON"),
    ('{"name": "x"}', "must be a JSON list"),
    ('[{"name": "x"}]', "missing required field: upstream at proxy 1"),
])
def test_bad_config_exits_with_a_clear_error(tmp_path, content, needle):
    cfg = tmp_path / "bad.json"
    cfg.write_text(content)
    proc = start("--port", str(free_port()), "--config", str(cfg))
    out, err = proc.communicate(timeout=20)
    assert proc.returncode != 0
    assert needle in err and str(cfg) in err


def test_api_port_in_use_exits_nonzero():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        proc = start("--port", str(busy.getsockname()[1]))
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 1 and "cannot start" in err
