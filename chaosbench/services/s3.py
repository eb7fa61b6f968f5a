"""A real S3 HTTP endpoint (moto's server) with fault hooks on the same port.

    python -m chaosbench.services.s3 --host 0.0.0.0 --port 5000 --bucket chaosbench

Path-style addressing (``http://host:port/bucket/key``); any credentials are accepted. Faults are
driven over HTTP so a containerised endpoint can be controlled by the harness:

    POST /_chaos/fault  {"mode": "ok" | "403" | "503"}   -> {"mode": ...}
    GET  /_chaos/fault                                    -> {"mode": ...}
    GET  /_chaos/health                                   -> {"ok": true, "bucket": ...}

"403" answers every S3 request with S3's AccessDenied error (refused credentials), "503" with
SlowDown (throttling, which clients retry). Unreachability is the fault proxy's job, not ours.
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import urllib.error
import urllib.request
import uuid

from chaosbench.services.ports import free_port

MODES = ("ok", "403", "503")

_ERRORS = {
    "403": ("403 Forbidden", "AccessDenied", "Access Denied"),
    "503": ("503 Slow Down", "SlowDown", "Please reduce your request rate."),
}


class S3FaultError(RuntimeError):
    """The fault endpoint refused a request or could not be reached."""


class FaultInjector:
    """WSGI middleware: answers /_chaos/* itself, fails S3 requests while a fault is set."""

    def __init__(self, app, bucket: str):
        self.app = app
        self.bucket = bucket
        self._mode = "ok"
        self._lock = threading.Lock()

    @property
    def mode(self) -> str:
        with self._lock:
            return self._mode

    def set_mode(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown fault mode {mode!r}; valid modes: {', '.join(MODES)}")
        with self._lock:
            self._mode = mode

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        if path.startswith("/_chaos/"):
            return self._control(environ, start_response, path)
        mode = self.mode
        if mode != "ok":
            return self._s3_error(start_response, mode, path, environ.get("REQUEST_METHOD") == "HEAD")
        return self.app(environ, start_response)

    def _control(self, environ, start_response, path):
        method = environ.get("REQUEST_METHOD")
        if path == "/_chaos/health" and method == "GET":
            return _json(start_response, "200 OK", {"ok": True, "bucket": self.bucket, "mode": self.mode})
        if path == "/_chaos/fault" and method == "GET":
            return _json(start_response, "200 OK", {"mode": self.mode})
        if path == "/_chaos/fault" and method == "POST":
            try:
                length = int(environ.get("CONTENT_LENGTH") or 0)
                body = json.loads(environ["wsgi.input"].read(length) or b"null")
                if not isinstance(body, dict) or "mode" not in body:
                    raise ValueError('body must be a JSON object like {"mode": "503"}')
                self.set_mode(str(body["mode"]))
            except (ValueError, json.JSONDecodeError) as exc:
                return _json(start_response, "400 Bad Request", {"error": str(exc), "valid_modes": list(MODES)})
            return _json(start_response, "200 OK", {"mode": self.mode})
        return _json(start_response, "404 Not Found", {"error": f"no route {method} {path}"})

    def _s3_error(self, start_response, mode, resource, head):
        status, code, message = _ERRORS[mode]
        request_id = uuid.uuid4().hex[:16].upper()
        body = ('<?xml version="1.0" encoding="UTF-8"?>\n'
                f"<Error><Code>{code}</Code><Message>{message}</Message>"
                f"<Resource>{resource}</Resource><RequestId>{request_id}</RequestId></Error>").encode()
        headers = [("Content-Type", "application/xml"), ("x-amz-request-id", request_id),
                   ("Content-Length", "0" if head else str(len(body)))]
        start_response(status, headers)
        return [b""] if head else [body]


def _json(start_response, status, obj):
    data = json.dumps(obj).encode()
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return [data]


def _create_bucket(endpoint_url: str, bucket: str) -> None:
    # moto accepts unsigned requests; an existing bucket is fine (restart on a kept endpoint).
    req = urllib.request.Request(f"{endpoint_url}/{bucket}", method="PUT", data=b"")
    try:
        urllib.request.urlopen(req, timeout=10).close()
    except urllib.error.HTTPError as exc:
        if exc.code != 409:
            raise


class S3Server:
    """``with S3Server(bucket="chaosbench") as s3: boto3.client("s3", endpoint_url=s3.endpoint_url)``."""

    def __init__(self, host: str = "127.0.0.1", port: int | None = None, bucket: str = "chaosbench"):
        self.host = host
        self.port = port or free_port(host)
        self.bucket = bucket
        self._server = None
        self._thread: threading.Thread | None = None
        self.faults: FaultInjector | None = None

    @property
    def endpoint_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> "S3Server":
        from moto.moto_server.werkzeug_app import (DomainDispatcherApplication, MotoRequestHandler,
                                                   create_backend_app)
        from werkzeug.serving import make_server

        self.faults = FaultInjector(DomainDispatcherApplication(create_backend_app), self.bucket)
        self._server = make_server(self.host, self.port, self.faults, threaded=True,
                                   request_handler=MotoRequestHandler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="s3-server", daemon=True)
        self._thread.start()
        try:
            _create_bucket(self.endpoint_url, self.bucket)
        except BaseException:
            self.stop()
            raise
        return self

    def serve_forever(self) -> None:
        """Block until stop() (from a signal handler) ends the server."""
        thread = self._thread   # stop() clears the attribute from another thread
        assert thread is not None, "call start() first"
        while thread.is_alive():
            thread.join(0.5)

    def set_fault(self, mode: str) -> None:
        assert self.faults is not None, "call start() first"
        self.faults.set_mode(mode)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None

    def __enter__(self) -> "S3Server":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def set_s3_fault(endpoint_url: str, mode: str, timeout: float = 5.0) -> str:
    """Set the fault mode of a running endpoint (ours, local or in a container); returns the mode now set."""
    if mode not in MODES:
        raise ValueError(f"unknown S3 fault mode {mode!r}; valid modes: {', '.join(MODES)}")
    req = urllib.request.Request(f"{endpoint_url.rstrip('/')}/_chaos/fault", method="POST",
                                 data=json.dumps({"mode": mode}).encode(),
                                 headers={"Content-Type": "application/json"})
    return _call(req, timeout)["mode"]


def get_s3_fault(endpoint_url: str, timeout: float = 5.0) -> str:
    return _call(urllib.request.Request(f"{endpoint_url.rstrip('/')}/_chaos/fault"), timeout)["mode"]


def s3_health(endpoint_url: str, timeout: float = 2.0) -> dict:
    return _call(urllib.request.Request(f"{endpoint_url.rstrip('/')}/_chaos/health"), timeout)


def _call(req: urllib.request.Request, timeout: float) -> dict:
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        raise S3FaultError(f"{req.full_url}: HTTP {exc.code}: {exc.read().decode(errors='replace')}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise S3FaultError(f"{req.full_url}: unreachable ({exc}); is the S3 endpoint running?") from exc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaosbench.services.s3", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=5000)
    parser.add_argument("--bucket", default="chaosbench")
    args = parser.parse_args(argv)
    server = S3Server(args.host, args.port, args.bucket)
    try:
        server.start()
    except OSError as exc:
        print(f"error: cannot serve S3 on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 2
    # stop() from a signal handler would deadlock serve_forever's own thread; hand it off.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: threading.Thread(target=server.stop).start())
    print(f"S3 endpoint ready at {server.endpoint_url} (bucket {args.bucket!r})", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
