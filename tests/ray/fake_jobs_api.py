"""A small stand-in for a Ray head's Jobs REST API (the routes chaosbench/cluster/ray/jobs_api.py calls),
served over real HTTP on a loopback port, for the address backend's unit tests."""
from __future__ import annotations

import fnmatch
import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeJobsAPI:
    """`finish(entrypoint) -> (status, logs)` decides how each submitted job ends (default: SUCCEEDED, no
    logs); a job whose entrypoint contains `running_marker` stays RUNNING until stopped."""

    def __init__(self, finish=None, running_marker: str = "trainer.ray_driver"):
        self.finish = finish or (lambda entrypoint: ("SUCCEEDED", ""))
        self.running_marker = running_marker
        self.jobs: dict[str, dict] = {}
        self.packages: dict[str, bytes] = {}
        self.requests: list[tuple[str, str]] = []
        self.ray_logs: dict[tuple[str, str], str] = {}   # (node ip, file under its logs dir) -> text
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, code: int, body=None):
                raw = json.dumps(body).encode() if body is not None else b""
                self.send_response(code)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def _body(self) -> bytes:
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def do_GET(self):
                fake.requests.append(("GET", self.path))
                if self.path == "/api/version":
                    return self._send(200, {"version": "4", "ray_version": "2.60.0"})
                if self.path.startswith("/api/packages/"):
                    return self._send(200, {}) if self.path in fake.packages else self._send(404, None)
                if self.path == "/api/jobs/":
                    return self._send(200, list(fake.jobs.values()))
                if self.path.startswith("/api/v0/logs"):
                    return self._logs()
                parts = self.path.split("/")   # '', api, jobs, id[, logs]
                job = fake.jobs.get(parts[3]) if len(parts) > 3 else None
                if job is None:
                    return self._send(404, {"error": "no such job"})
                if len(parts) == 5 and parts[4] == "logs":
                    return self._send(200, {"logs": job["logs"]})
                return self._send(200, {k: v for k, v in job.items() if k != "logs"})

            def _logs(self):
                url = urllib.parse.urlsplit(self.path)
                q = dict(urllib.parse.parse_qsl(url.query))
                if url.path == "/api/v0/logs/file":
                    text = fake.ray_logs.get((q["node_ip"], q["filename"]))
                    if text is None:
                        return self._send(500, {"error": "no such file"})
                    raw = text.encode()
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    return self.wfile.write(raw)
                names = [f for ip, f in fake.ray_logs if ip == q["node_ip"] and fnmatch.fnmatch(f, q.get("glob", "*"))
                         and ("/" not in f or "/" in q.get("glob", "*"))]
                self._send(200, {"result": True, "msg": "", "data": {"result": {"any": names + ["old/"]}}})

            def do_PUT(self):
                fake.requests.append(("PUT", self.path))
                fake.packages[self.path] = self._body()
                self._send(200, {})

            def do_POST(self):
                fake.requests.append(("POST", self.path))
                if self.path == "/api/jobs/":
                    body = json.loads(self._body())
                    if body["submission_id"] in fake.jobs:
                        return self._send(400, {"error": f"job {body['submission_id']} already exists"})
                    status, logs = (("RUNNING", "") if fake.running_marker in body["entrypoint"]
                                    else fake.finish(body["entrypoint"]))
                    fake.jobs[body["submission_id"]] = {**body, "status": status, "logs": logs, "message": ""}
                    return self._send(200, {"submission_id": body["submission_id"]})
                if self.path.endswith("/stop"):
                    job = fake.jobs[self.path.split("/")[3]]
                    job["status"] = "STOPPED"
                    return self._send(200, {"stopped": True})
                self._send(404, {"error": self.path})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
