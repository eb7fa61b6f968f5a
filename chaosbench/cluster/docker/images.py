"""Build the cluster's docker images locally, with no registry: `python -m chaosbench.cluster.docker.images build`.

Three images, each tagged with a hash of everything that goes into it, so an unchanged input is a
no-op (`docker image inspect` on the tag) and a change rebuilds only from that layer on:

1. base  `chaosbench/base:<hash>` — a Debian bookworm rootfs made by debootstrap and `docker import`ed
   (skipped when `--base IMAGE` names a public base such as python:3.11-slim).
2. deps  `chaosbench/deps:<hash>` — Python venv with the locked dependencies (torch included). The
   wheels are downloaded on the host by pip (which honours the host's index, proxy and CA settings)
   into a persistent wheelhouse and served to the build over HTTP on the docker bridge, so no wheel
   ends up in a layer and no BuildKit is needed.
3. node  `chaosbench/node:<hash>` — the project's install metadata (entry points); the source is
   bind-mounted read-only at run time (SOURCE_MOUNT), so a code change rebuilds nothing.

The lock is the host venv's `pip freeze`, so containers run exactly the versions the tests run.
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import functools
import hashlib
import http.server
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from chaosbench.cluster.docker import venv_volume
from chaosbench.cluster.errors import ClusterError

REPO = Path(__file__).resolve().parents[3]
COMPOSE_DIR = REPO / "compose"
CACHE = Path(os.environ.get("CHAOSBENCH_CACHE", Path.home() / ".cache" / "chaosbench"))
DEBIAN_MIRROR = os.environ.get("CHAOSBENCH_DEBIAN_MIRROR", "http://deb.debian.org/debian")
# libfaketime: clock_skew's LD_PRELOAD; fuse3: disk_fault's FUSE layer (libfuse3 + fusermount3)
BASE_PACKAGES = ["python3", "python3-venv", "ca-certificates", "iptables", "iproute2", "procps",
                 "etcd-server", "libfaketime", "fuse3"]
SOURCE_MOUNT = "/opt/chaosbench"   # where containers see the project (read-only bind mount of REPO)
LABEL = "io.chaosbench.image=1"
HEAVY = re.compile(r"^(torch|triton|nvidia-|cuda-)", re.I)   # the ~3 GB that rarely changes
# A fixed wheel-server port keeps the RUN lines (and so docker's build cache) identical across
# builds; builds are serialised by a lock file, so only a foreign listener can make it busy.
WHEELS_PORT = int(os.environ.get("CHAOSBENCH_WHEELS_PORT", "38474"))


def _log(msg: str) -> None:
    print(f"images: {msg}", file=sys.stderr, flush=True)


def _sha(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\0")
    return h.hexdigest()[:16]


def image_exists(tag: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", tag], capture_output=True,
                          timeout=60).returncode == 0


def _image_id(tag: str) -> str:
    out = subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", tag], capture_output=True,
                         text=True, timeout=60)
    if out.returncode != 0:
        raise ClusterError(f"base image {tag!r} is not available locally: {out.stderr.strip()} "
                           f"(pull it first, or omit --base to bootstrap Debian with debootstrap)")
    return out.stdout.strip()


def _run(cmd: list[str], timeout: float, **kw) -> None:
    _log("$ " + " ".join(cmd)[:200])
    try:
        subprocess.run(cmd, check=True, timeout=timeout, **kw)
    except subprocess.CalledProcessError as exc:
        raise ClusterError(f"command failed ({exc.returncode}): {' '.join(cmd)[:300]}") from exc


# -- 1. base ---------------------------------------------------------------------------------
def build_base(suite: str = "bookworm") -> str:
    tag = f"chaosbench/base:{suite}-{_sha(suite, DEBIAN_MIRROR, *BASE_PACKAGES)}"
    if image_exists(tag):
        return tag
    if shutil.which("debootstrap") is None:
        raise ClusterError("debootstrap is not installed (apt-get install debootstrap), or pass "
                           "--base IMAGE with a base image available to docker")
    with tempfile.TemporaryDirectory(prefix="cb-rootfs-") as tmp:
        root = Path(tmp) / "rootfs"
        _run(["debootstrap", "--variant=minbase", "--include=" + ",".join(BASE_PACKAGES), suite,
              str(root), DEBIAN_MIRROR], timeout=1800, stdout=subprocess.DEVNULL)
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        try:
            _run(["docker", "import", "-c", "ENV LANG=C.UTF-8", "-c", f"LABEL {LABEL}", "-", tag],
                 timeout=600, stdin=tar.stdout, stdout=subprocess.DEVNULL)
        finally:
            tar.stdout.close()
            tar.wait(timeout=60)
    return tag


# -- 2. deps ---------------------------------------------------------------------------------
def _installed_fingerprint() -> str:
    """What `pip freeze` would read, cheaply: every install-metadata entry (name-version.dist-info and
    the like, with its mtime) of every directory on this interpreter's path. An install, upgrade,
    reinstall or removal changes it; a directory without such entries (a checkout or test folder
    that pytest or a script put on the path) does not count, so writing files there changes nothing."""
    parts: list[str] = [sys.executable]
    for d in sys.path:
        if not d or not os.path.isdir(d):
            continue
        with os.scandir(d) as it:
            entries = sorted(f"{e.name}:{e.stat().st_mtime_ns}" for e in it
                             if e.name.endswith((".dist-info", ".egg-info", ".egg-link", ".pth")))
        if entries:
            parts += [d, *entries]
    return _sha(*parts)


def lock_requirements() -> str:
    """The host venv's exact versions (the project itself excluded). `pip freeze` costs ~0.6 s of CPU
    before every run's cluster starts, so its answer is kept per installed set (_installed_fingerprint)."""
    cached = CACHE / "locks" / f"{_installed_fingerprint()}.txt"
    if cached.is_file():
        return cached.read_text()
    lock = _freeze()
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(lock)
    tmp.replace(cached)        # whole or absent: a reader never sees half a lock
    return lock


def _freeze() -> str:
    out = subprocess.run([sys.executable, "-m", "pip", "freeze", "--all", "--exclude-editable"],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    lines = [ln for ln in out.splitlines()
             if ln and not ln.startswith("#") and not ln.lower().startswith("chaosbench")
             and " @ " not in ln]      # direct URL/path installs cannot be reproduced in the image
    return "\n".join(sorted(lines, key=str.lower)) + "\n"


def _fill_wheelhouse(lock: Path, wheelhouse: Path) -> None:
    wheelhouse.mkdir(parents=True, exist_ok=True)
    # `pip download` skips files already in the wheelhouse; the host's pip config applies.
    _run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheelhouse),
          "-r", str(lock)], timeout=3600)
    sdists = [p for p in wheelhouse.iterdir() if p.suffix == ".gz" or p.suffix == ".zip"]
    for sd in sdists:   # build sdists into wheels here, so the image build needs no compiler
        _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheelhouse), str(sd)],
             timeout=600)
        sd.unlink()


class _WheelServer:
    """Serve the wheelhouse to `docker build` on the docker bridge address for the build's duration."""

    def __init__(self, directory: Path):
        handler = functools.partial(_QuietHandler, directory=str(directory))
        self.host = _bridge_gateway()
        try:
            self.httpd = http.server.ThreadingHTTPServer((self.host, WHEELS_PORT), handler)
        except OSError:   # busy: any port works, at the price of a build-cache miss
            self.httpd = http.server.ThreadingHTTPServer((self.host, 0), handler)
        self.url = f"http://{self.host}:{self.httpd.server_address[1]}/"

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def _bridge_gateway() -> str:
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "docker0"], capture_output=True, text=True,
                         timeout=10).stdout.split()
    if "inet" in out:
        return out[out.index("inet") + 1].split("/")[0]
    return "172.17.0.1"


def build_deps(base: str) -> str:
    dockerfile = (COMPOSE_DIR / "Dockerfile.deps").read_bytes()
    lock = lock_requirements()
    tag = f"chaosbench/deps:{_sha(_image_id(base), dockerfile, lock)}"
    if image_exists(tag):
        return tag
    with tempfile.TemporaryDirectory(prefix="cb-deps-ctx-") as ctx:
        ctx = Path(ctx)
        (ctx / "requirements.lock").write_text(lock)
        (ctx / "requirements-heavy.lock").write_text(
            "".join(ln + "\n" for ln in lock.splitlines() if HEAVY.match(ln)))
        (ctx / "Dockerfile").write_bytes(dockerfile)
        t0 = time.monotonic()
        _fill_wheelhouse(ctx / "requirements.lock", CACHE / "wheels")
        _log(f"wheelhouse ready in {time.monotonic() - t0:.0f}s")
        with _WheelServer(CACHE / "wheels") as srv:
            _run(["docker", "build", "-q", "-t", tag, "--build-arg", f"BASE={base}",
                  "--build-arg", f"WHEELS_URL={srv.url}", "--build-arg", f"WHEELS_HOST={srv.host}",
                  str(ctx)], timeout=3600, stdout=subprocess.DEVNULL)
    return tag


# -- 3. node ---------------------------------------------------------------------------------
def build_node(deps: str) -> str:
    """Install metadata only (pyproject + empty packages); the source is mounted at run time."""
    dockerfile = (COMPOSE_DIR / "Dockerfile.node").read_bytes()
    pyproject = (REPO / "pyproject.toml").read_bytes()
    tag = f"chaosbench/node:{_sha(deps, dockerfile, pyproject)}"
    if image_exists(tag):
        return tag
    with tempfile.TemporaryDirectory(prefix="cb-node-ctx-") as ctx:
        ctx = Path(ctx)
        src = ctx / "src"
        for pkg in ("chaosbench", "trainer"):
            (src / pkg).mkdir(parents=True)
            (src / pkg / "__init__.py").write_text("")
        (src / "pyproject.toml").write_bytes(pyproject)
        if (REPO / "README.md").exists():
            shutil.copy2(REPO / "README.md", src / "README.md")
        (ctx / "Dockerfile").write_bytes(dockerfile)
        _run(["docker", "build", "-q", "-t", tag, "--build-arg", f"DEPS={deps}",
              str(ctx)], timeout=900, stdout=subprocess.DEVNULL)
    return tag


@contextlib.contextmanager
def _build_lock():
    """One build at a time per host; a waiter then finds the tags."""
    if shutil.which("docker") is None:
        raise ClusterError("docker is not installed")
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def build_base_only() -> str:
    """The base image alone: it needs neither the venv nor the lock, so set-up builds it while pip
    installs the venv (this module imports only the standard library and runs on any python3)."""
    with _build_lock():
        return build_base()


def build(base: str | None = None, venv: bool = False) -> str:
    """Build (or reuse) base → deps → node and return the node image tag; venv=True also makes the
    node image's /opt/venv volume where the storage driver gains from it (venv_volume.py)."""
    t0 = time.monotonic()
    with _build_lock():
        base_tag = base or build_base()
        deps = build_deps(base_tag)
        node = build_node(deps)
        _write_current(node)
        if venv:
            venv_volume.volume_for(node, CACHE, make=True, prune_others=True)
    _log(f"node image {node} ready in {time.monotonic() - t0:.1f}s")
    return node


def _write_current(tag: str) -> None:
    CACHE.mkdir(parents=True, exist_ok=True)
    (CACHE / "node-image").write_text(tag + "\n")


def node_image(build_if_missing: bool = True) -> str:
    """The node image for the current source: $CHAOSBENCH_NODE_IMAGE, else build/reuse it."""
    if os.environ.get("CHAOSBENCH_NODE_IMAGE"):
        return os.environ["CHAOSBENCH_NODE_IMAGE"]
    if build_if_missing:
        return build(os.environ.get("CHAOSBENCH_BASE_IMAGE") or None)
    raise ClusterError("no node image: run `python -m chaosbench.cluster.docker.images build`")


def node_venv_volume(image: str) -> str | None:
    """The read-only volume with `image`'s /opt/venv that our containers mount, where docker's storage
    driver makes imports from image layers slow and the volume was made (venv_volume.py)."""
    decided, name = venv_volume.known(venv_volume.image_id(image), CACHE)
    if decided:
        return name
    with _build_lock():
        return venv_volume.volume_for(image, CACHE, make=venv_volume.setting() == "1")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m chaosbench.cluster.docker.images",
                                 description="Build the chaosbench cluster images locally (no registry).")
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build or reuse base, deps and node images")
    b.add_argument("--base", default=os.environ.get("CHAOSBENCH_BASE_IMAGE"),
                   help="base image already available to docker (default: debootstrap Debian bookworm)")
    b.add_argument("--venv-volume", action="store_true",
                   help="also copy the node image's /opt/venv into a volume our containers import torch from, "
                        "where docker's storage driver is fuse-overlayfs or vfs (about a minute, once per image)")
    sub.add_parser("base", help="build or reuse the debootstrap base image only (set-up runs it beside pip)")
    args = ap.parse_args(argv)
    try:
        print(build_base_only() if args.cmd == "base" else build(args.base, venv=args.venv_volume))
    except ClusterError as exc:
        print(f"images: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
