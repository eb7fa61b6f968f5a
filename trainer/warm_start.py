"""Warm start: a per-node server with torch already imported forks each new worker.

Why: after a node loss every surviving worker is restarted by its torchrun agent, and a fresh
Python process spends seconds on `import torch` and on the lazy `torch._dynamo` import that the
first optimizer triggers -- on every node, inside the recovery window. Forking a process that has
already paid for those imports starts a worker in milliseconds. (The same thing DataLoader workers
do when they fork after `import torch`.)

Three roles, all in this stdlib-only module so the client itself starts fast:

    python -m trainer.warm_start node -- python -m torch.distributed.run ... \
        -m trainer.warm_start run -m trainer.train --config ...

  node    the node launcher: binds an abstract unix socket, starts `serve` on it (it dies with the
          agent: PR_SET_PDEATHSIG), then execs torchrun. With `--go FILE` it first waits for FILE,
          torch imported meanwhile: nodes start with the cluster, training on a signal (node()).
          With `--ready FILE` the server creates FILE once its imports are done (the harness gives
          the go when every node is ready: see Server.preload).
  serve   (on the socket `node` bound) imports torch & co, then forks one child per request.
  run     what torchrun starts as the worker: sends argv, env, cwd and its stdin/stdout/stderr to the
          server, forwards every signal torchrun sends to the forked child and exits with its status
          (a child killed by signal N kills the client with N, so torchrun sees the same exit).
          If the client dies (SIGKILL), the child notices through a pidfd and kills itself.
          No server on the node, or it died before forking: the client execs a cold `python -m ...`.

A frozen worker (SIGSTOP, or any process that cannot run) never acts on torchrun's stop signal:
SIGTERM stays pending and torchrun escalates to SIGKILL only after its fixed 30 s, while every other
node waits in the rendezvous for that agent. So the server also acts as a hang watchdog: a worker
(its client or its fork) that has held a pending SIGTERM for `--stop-kill-after` seconds (default
3, env TRAINER_STOP_KILL_AFTER_S) is SIGKILLed, and torchrun sees it gone at once (docs/gray-failures.md).
A fork that outlives its client by as long is SIGKILLed too: its own client watch is a thread that a
stopped process cannot run, and a fork in its own session escapes the launcher's process-group kill.

Who may ask: the socket is abstract (no file, so no file permissions), and on the local and Slurm
backends every process of the host shares its namespace. So the server asks the kernel who connected
(SO_PEERCRED) and serves only a process of its own uid that descends from the node launcher it was
started by (torchrun's workers, and their children); anything else is refused and logged, before a
byte of its request is read. The client's `pid` field must be the connecting process.

Whom the client tells: the name is no secret (any process of the network namespace reads bound
abstract names in /proc/net/unix) and, once the server is gone (the OOM killer, a fault), anyone may
bind it. So the client sends nothing (argv, its environment with the S3 secret, its stdio) until the
kernel's record of who listens on the name (SO_PEERCRED: the process that called listen()) says it
is the node launcher: our uid, and the pid and /proc start time the launcher put in
$CHAOSBENCH_WARM_SERVER before starting anything. Only the launcher and its descendants carry that
environment and a process cannot fake SO_PEERCRED, so a process of another uid cannot pass the
check, whether it guessed the name, read it, or bound it before or after the server. (A process of
our own uid could read our memory anyway: not a boundary this check draws.) Anything else: the
worker starts cold, and says why.

Costs and limits (docs/recovery.md): one extra idle process per node holding torch (its pages are
shared copy-on-write with the workers); the server must never initialise CUDA (it does not: only
imports), and environment variables a library reads at *import* time come from the node, not from
the worker's own environment.
"""
from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import struct
import sys
import threading
import time
import uuid

SOCKET_ENV = "CHAOSBENCH_WARM_SOCKET"
SERVER_ENV = "CHAOSBENCH_WARM_SERVER"     # "<pid>:<start time>" of the process that listens (the node launcher)
# before `;`: imported before the node says ready; after: may finish after it (boto3 is not needed to
# start a worker, only by its first S3 upload or restore, and the server forks nothing before it is done)
DEFAULT_PRELOAD = "torch,torch.distributed,torch.nn.parallel,torch._dynamo,trainer.train;boto3"
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
MAX_MSG = 1 << 20
PR_SET_PDEATHSIG = 1


def _log(msg: str) -> None:
    print(f"[warm_start {os.getpid()}] {msg}", file=sys.stderr, flush=True)


def _address(name: str) -> str:
    return "\0" + name            # abstract namespace: no file to clean up, gone with the server


def _send(sock: socket.socket, obj: dict, fds: list[int] | None = None) -> None:
    data = json.dumps(obj).encode()
    if fds:
        socket.send_fds(sock, [data], fds)
    else:
        sock.send(data)


# -- node --------------------------------------------------------------------------------------

def _import_all(modules: str) -> None:
    import importlib
    for mod in filter(None, modules.replace(";", ",").split(",")):
        try:
            importlib.import_module(mod)
        except ImportError as exc:            # optional extras (boto3) may be missing: still useful
            _log(f"preload {mod}: {exc}")


def _warm_boto3() -> None:
    """A worker's first S3 client costs 0.1-0.4 s of botocore reading its JSON models, inside the
    restore. Reading them here, into the default session that forks inherit, makes it milliseconds.
    Explicit dummy credentials: the worker's own credentials are resolved in the worker."""
    import boto3
    try:
        boto3.client("s3", region_name="us-east-1", aws_access_key_id="-", aws_secret_access_key="-")
    except Exception as exc:   # an optional speed-up: the worker builds its client cold instead
        _log(f"warming boto3: {exc}")


def node(argv: list[str], preload: str, stop_kill_after: str, go: str = "", ready: str = "") -> None:
    """Bind the socket, start the server as our child, then become torchrun (the server dies with us).

    Binding here, before torchrun exists, means no worker can ever find the socket missing.

    With `go` (a file), the node was started with its cluster, before the run: it waits for the file,
    then goes (a node restarted later finds it and goes at once). When the launcher is torchrun on this
    interpreter, this process imports it while the run has not started yet, the server is a fork of it
    (torch imported once per node, not twice: the nodes share a few cores), and on the go signal
    torchrun runs here -- same pid, process tree and env as the exec it replaces."""
    if not argv:
        raise SystemExit("warm_start node: give the launcher command after --")
    name = f"chaosbench-warm-{uuid.uuid4().hex[:16]}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(_address(name))
    listener.listen(64)                       # workers may queue while the server imports torch
    os.environ[SOCKET_ENV] = name
    os.environ[SERVER_ENV] = f"{os.getpid()}:{_start_time(os.getpid())}"   # who called listen(): see run()
    in_process = bool(go) and _torchrun_here(argv)
    parent = os.getpid()
    sys.stdout.flush(); sys.stderr.flush()
    if os.fork() == 0:
        try:
            import ctypes
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != parent:        # the launcher died before prctl took effect
                os._exit(0)
            if in_process:                    # torch is imported: serve from this fork
                serve(listener.detach(), preload, float(stop_kill_after), ready)
            fd = listener.detach()
            os.set_inheritable(fd, True)
            os.execv(sys.executable, [sys.executable, "-m", "trainer.warm_start", "serve",
                                      "--fd", str(fd), "--preload", preload,
                                      "--stop-kill-after", stop_kill_after, "--ready", ready])
        finally:
            os._exit(127)
    listener.close()
    while go and not os.path.exists(go):
        time.sleep(0.02)
    if in_process:
        import runpy
        sys.argv = [argv[2], *argv[3:]]
        runpy.run_module("torch.distributed.run", run_name="__main__", alter_sys=True)
        sys.exit(0)
    os.execvp(argv[0], argv)


def _torchrun_here(argv: list[str]) -> bool:
    """The launcher is `python -m torch.distributed.run` on this interpreter, and its imports are done."""
    import shutil
    found = shutil.which(argv[0])
    if argv[1:3] != ["-m", "torch.distributed.run"] or not found or \
            os.path.realpath(found) != os.path.realpath(sys.executable):
        return False
    try:
        import torch.distributed.launcher.api  # noqa: F401  (what torchrun imports; it runs from it later)
    except ImportError as exc:
        _log(f"pre-importing the launcher: {exc}; it starts cold")
        return False
    return True


# -- serve -------------------------------------------------------------------------------------

def _stat_fields(pid: int) -> list[bytes]:
    """/proc/<pid>/stat from the state field on (the name field may hold spaces and ')': read after the last ')')."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()


def _parent(pid: int) -> int:
    return int(_stat_fields(pid)[1])


def descends_from(pid: int, root: int) -> bool:
    for _ in range(64):                   # a process tree is never this deep; a loop is no proof
        if pid == root:
            return True
        if pid <= 1:
            return False
        try:
            pid = _parent(pid)
        except (OSError, ValueError, IndexError):
            return False
    return False


def peer_problem(conn: socket.socket, root: int) -> str | None:
    """Why this connection may not start a worker (None: it may): not our uid, or not a process of
    the node launcher's tree (`root`)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", creds)
    if uid != os.getuid():
        return f"peer pid {pid} runs as uid {uid}, not {os.getuid()}"
    if not descends_from(pid, root):
        return f"peer pid {pid} is not a process of the node launcher's tree (pid {root})"
    return None


SIGTERM_BIT = 1 << (signal.SIGTERM - 1)


def sigterm_pending(pid: int) -> bool:
    """A SIGTERM was sent to `pid` but not delivered yet (the process is stopped or cannot run)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            masks = [int(line.split()[1], 16) for line in f if line.startswith(("SigPnd:", "ShdPnd:"))]
    except (OSError, ValueError, IndexError):
        return False
    return any(m & SIGTERM_BIT for m in masks)


class StopWatchdog:
    """SIGKILL a worker whose SIGTERM has stayed pending for `kill_after_s` (see the module doc)."""

    def __init__(self, kill_after_s: float, pending=sigterm_pending, clock=time.monotonic):
        self.kill_after_s, self._pending, self._clock = kill_after_s, pending, clock
        self._since: dict[int, float] = {}

    def check(self, workers: dict[int, int], client_gone=lambda fork: False) -> list[int]:
        """`workers`: fork pid -> client pid; `client_gone(fork)`: that fork's client has exited.
        Returns the forks it killed (with their clients, while those live)."""
        now, killed = self._clock(), []
        for fork, client in workers.items():
            orphan = client_gone(fork)
            if not (orphan or self._pending(fork) or self._pending(client)):
                self._since.pop(fork, None)
                continue
            if now - self._since.setdefault(fork, now) < self.kill_after_s:
                continue
            why = "outlived its client" if orphan else "ignored SIGTERM"
            _log(f"worker {fork} (client {client}) {why} for {now - self._since.pop(fork):.1f}s "
                 f"(stopped or hung): SIGKILL")
            for pid in ((fork,) if orphan else (client, fork)):   # a gone client's pid may be another's now
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            killed.append(fork)
        for gone in set(self._since) - set(workers):
            del self._since[gone]
        return killed


def _start_time(pid: int) -> str:
    """/proc/<pid>/stat's start time ("" if the process is gone or a zombie): a pid with its start time
    names one process even after the pid is reused."""
    try:
        fields = _stat_fields(pid)
    except (OSError, IndexError):
        return ""
    return "" if fields[0] in (b"Z", b"X") else fields[19].decode()


class Server:
    def __init__(self, listener: socket.socket, root: int | None = None, stop_kill_after_s: float = 3.0):
        self.listener = listener
        self.root = os.getppid() if root is None else root   # the launcher (torchrun) that `node` became
        self.children: dict[int, socket.socket] = {}
        self.clients: dict[int, int] = {}                     # fork pid -> its client's pid
        self.client_starts: dict[int, str] = {}               # fork pid -> its client's start time
        self.watchdog = StopWatchdog(stop_kill_after_s)

    def preload(self, modules: str, ready: str = "") -> None:
        """Import `modules` (a comma list), then create the file `ready` (if given); modules after a
        `;` are imported after the file is written, before the first worker is forked.

        Why the file: the nodes of a cluster start together on a few shared cores, and an agent that
        joins the first rendezvous while three servers import torch._dynamo can be starved past the
        round's last call (measured: a node 3.5 s late, a first round of 2 of 3 nodes, then a
        restart at 3). A harness that gives the go only when every node is ready gets a first round
        on a quiet machine; the first worker would wait for this import anyway.
        Why after it: boto3 and its S3 client (~0.3 CPU s a node) are not needed to rendezvous, so
        they overlap the agents' first rendezvous instead of holding back the go."""
        t0 = time.monotonic()
        first, _, late = modules.partition(";")
        _import_all(first)
        _log(f"ready: preloaded {first} in {time.monotonic() - t0:.2f}s")
        if ready:
            try:
                with open(ready, "w") as f:
                    f.write(f"{os.getpid()}\n")
            except OSError as exc:            # the harness then waits out its bound: say why
                _log(f"cannot write the ready file {ready}: {exc}")
        if late:
            t1 = time.monotonic()
            _import_all(late)
            _log(f"preloaded {late} after ready in {time.monotonic() - t1:.2f}s")
        if "boto3" in sys.modules:
            _warm_boto3()

    def serve_forever(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self.listener, selectors.EVENT_READ)
        next_watch = 0.0
        while True:
            for _key, _ in sel.select(timeout=0.02):
                conn, _ = self.listener.accept()
                self._spawn(conn)
            self._reap()
            if time.monotonic() >= next_watch:
                self.watchdog.check(self.clients, self._client_gone)
                next_watch = time.monotonic() + 0.25

    def _spawn(self, conn: socket.socket) -> None:
        fds: list[int] = []
        try:
            why = peer_problem(conn, self.root)
            if why:                           # nothing read, nothing run: its fds are never received
                _log(f"refused: {why}")
                conn.close()
                return
            data, fds, _flags, _addr = socket.recv_fds(conn, MAX_MSG, 3)
            req = json.loads(data)
            if len(fds) != 3:
                raise ValueError(f"expected 3 file descriptors (stdin, stdout, stderr), got {len(fds)}")
            peer = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
            if int(req.get("pid", -1)) != peer:
                raise ValueError(f"request names pid {req.get('pid')}, but pid {peer} connected")
        except (OSError, ValueError, TypeError, AttributeError) as exc:   # any malformed request
            _log(f"bad request: {exc}")
            for fd in fds:
                os.close(fd)
            conn.close()
            return
        sys.stdout.flush(); sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            self._close_sockets(conn)         # the worker talks to nobody: its client is watched by pidfd
            _child(req, fds)                  # never returns
        for fd in fds:
            os.close(fd)
        self.children[pid] = conn
        self.clients[pid] = peer
        self.client_starts[pid] = _start_time(peer)
        try:
            _send(conn, {"pid": pid})
        except OSError:
            pass                              # client gone: the child's pidfd watch ends it

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            self.clients.pop(pid, None)
            self.client_starts.pop(pid, None)
            if conn is not None:
                try:
                    _send(conn, {"exit": os.waitstatus_to_exitcode(status)})
                except OSError:
                    pass
                conn.close()

    def _client_gone(self, fork: int) -> bool:
        # Not a pidfd: chaosbench's fault scripts find a warm-start fork by the one pidfd it holds (of its
        # client), and a server holding them too would be taken for a worker and frozen with it.
        start = _start_time(self.clients[fork])
        return not start or start != self.client_starts.get(fork)      # gone, a zombie, or its pid reused

    def _close_sockets(self, conn: socket.socket) -> None:
        self.listener.close()
        for c in self.children.values():
            c.close()
        conn.close()


def _watch_client(client_pid: int) -> None:
    """Kill this worker the moment its client dies (e.g. torchrun's SIGKILL after a failed stop)."""
    try:
        pidfd = os.pidfd_open(client_pid)
    except OSError:
        os.kill(os.getpid(), signal.SIGKILL)   # already gone
        return

    def wait():
        sel = selectors.DefaultSelector()
        sel.register(pidfd, selectors.EVENT_READ)
        sel.select()
        os.kill(os.getpid(), signal.SIGKILL)
    threading.Thread(target=wait, name="warm-start-client-watch", daemon=True).start()


def _child(req: dict, fds: list[int]) -> None:
    """The forked worker: become what `python <argv>` would have been, then leave like it."""
    code = 1
    try:
        os.setsid()                            # like torchrun's own workers: a session of its own
        for sig in (*FORWARDED, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)   # what a fresh interpreter installs
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        for i, fd in enumerate(fds):
            os.dup2(fd, i)
            os.close(fd)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        _watch_client(int(req["pid"]))
        import random
        random.seed()                          # forked children would otherwise share the server's state
        if "torch" in sys.modules and os.environ.get("OMP_NUM_THREADS", "").isdigit():
            sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
        code = _run_python_argv(req["argv"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, (int, type(None))):
            print(exc.code, file=sys.stderr)
    except BaseException:
        import traceback
        traceback.print_exc()
        code = 1
    finally:
        _leave(code)


def _run_python_argv(argv: list[str]) -> int:
    import runpy
    if len(argv) >= 2 and argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]
        _forget_preloaded(argv[1])
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    elif argv:
        sys.argv = list(argv)
        runpy.run_path(argv[0], run_name="__main__")
    else:
        raise SystemExit("warm_start: empty command")
    return 0


def _forget_preloaded(name: str) -> None:
    """`-m X` where the server preloaded X (trainer.train): runs as __main__ only, as in a cold start.
    Its imports stay loaded; left in sys.modules, X would exist twice (runpy warns 'found in
    sys.modules ... unpredictable behaviour'), and an `import X` elsewhere would get the other copy."""
    mod = sys.modules.pop(name, None)
    parent, _, child = name.rpartition(".")
    if mod is not None and parent in sys.modules and getattr(sys.modules[parent], child, None) is mod:
        delattr(sys.modules[parent], child)


def _leave(code: int) -> None:
    """What interpreter shutdown does (join non-daemon threads, atexit), then exit without the server's state."""
    try:
        me = threading.current_thread()
        for t in threading.enumerate():
            if t is not me and not t.daemon:
                t.join()
        import atexit
        atexit._run_exitfuncs()
        import logging
        logging.shutdown()
        sys.stdout.flush(); sys.stderr.flush()
    finally:
        os._exit(code)


def serve(fd: int, preload: str, stop_kill_after_s: float, ready: str = "") -> None:
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)     # lifetime = the agent's (PDEATHSIG), not a stop signal
    server = Server(socket.socket(fileno=fd), stop_kill_after_s=stop_kill_after_s)
    server.preload(preload, ready)
    server.serve_forever()


# -- run ---------------------------------------------------------------------------------------

def cold_start(argv: list[str], why: str) -> None:
    _log(f"{why}: cold start")
    os.execv(sys.executable, [sys.executable, *argv])


def server_problem(sock: socket.socket, expected: str) -> str | None:
    """Why the process listening on the connected name is not this node's warm server (None: it is).
    `expected`: $CHAOSBENCH_WARM_SERVER, "<pid>:<start time>" of the launcher that called listen()."""
    pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    if uid != os.getuid():
        return f"it is held by pid {pid} of uid {uid}, not of uid {os.getuid()}"
    want_pid, _, want_start = expected.partition(":")
    if pid != int(want_pid) or _start_time(pid) != want_start:   # a reused pid has another start time
        return f"it is held by pid {pid}, not by this node's launcher (pid {want_pid}, started at {want_start})"
    return None


def run(argv: list[str], ready_timeout: float) -> None:
    name = os.environ.get(SOCKET_ENV)
    if not name:
        cold_start(argv, f"${SOCKET_ENV} is not set (node not started by `warm_start node`)")
    expected = os.environ.get(SERVER_ENV, "")
    if not expected.partition(":")[0].isdigit():
        cold_start(argv, f"${SERVER_ENV} is not set, so the server on {name!r} cannot be told from another "
                         f"process holding the name (node not started by `warm_start node`?)")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        sock.connect(_address(name))
        why = server_problem(sock, expected)
        if why:                                # nothing sent: not argv, not our env, not our stdio
            sock.close()
            cold_start(argv, f"the socket {name!r} is not this node's warm server ({why}); nothing was sent to it")
        _send(sock, {"argv": argv, "env": dict(os.environ), "cwd": os.getcwd(), "pid": os.getpid()}, [0, 1, 2])
        sock.settimeout(ready_timeout)         # the server may still be importing torch
        reply = sock.recv(MAX_MSG)
    except OSError as exc:
        cold_start(argv, f"warm server {name!r} unavailable ({exc})")
    if not reply:
        cold_start(argv, f"warm server {name!r} closed the connection before starting the worker")
    child = int(json.loads(reply)["pid"])
    for sig in FORWARDED:
        signal.signal(sig, lambda s, _f: _forward(child, s))
    sock.settimeout(None)
    msg = sock.recv(MAX_MSG)
    if not msg:
        _log(f"warm server died while worker {child} ran; waiting for the worker")
        _wait_gone(child)
        sys.exit(1)
    code = int(json.loads(msg)["exit"])
    if code < 0:                               # killed by a signal: die the same way
        if -code not in (signal.SIGKILL, signal.SIGSTOP):   # these two cannot be (and need not be) reset
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        time.sleep(1)
    sys.exit(code)


def _forward(child: int, sig: int) -> None:
    try:
        os.kill(child, sig)
    except ProcessLookupError:
        return
    if sig == signal.SIGTERM:
        _force_kill_later(child)


_forcing: list[threading.Timer] = []


def _force_kill_later(child: int) -> None:
    """A worker that received SIGTERM but never acts on it (it holds the GIL in C code, so its Python
    handler never runs) would stay until torchrun's SIGKILL 30 s later, and its own client-death
    watcher is a Python thread that cannot run either: SIGKILL it after `TRAINER_STOP_FORCE_AFTER_S`
    (default 8 s; keep it above checkpoint.stop_save_timeout_s, the trainer refuses otherwise)."""
    if _forcing:
        return

    def kill() -> None:
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            return
        _log(f"worker {child} did not stop {stop_force_after_s():g}s after SIGTERM (hung holding the GIL?): SIGKILL")
    timer = threading.Timer(stop_force_after_s(), kill)
    timer.daemon = True
    _forcing.append(timer)
    timer.start()


def stop_force_after_s() -> float:
    try:
        return float(os.environ.get("TRAINER_STOP_FORCE_AFTER_S", "8"))
    except ValueError:
        return 8.0


def _wait_gone(pid: int) -> None:
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return
    sel = selectors.DefaultSelector()
    sel.register(fd, selectors.EVENT_READ)
    sel.select()


USAGE = """usage: python -m trainer.warm_start node [--preload MODS[;LATE]] [--stop-kill-after S] [--go FILE] [--ready FILE] -- LAUNCHER ARGV...
       python -m trainer.warm_start serve --fd N [--preload MODS] [--stop-kill-after S] [--ready FILE]   (started by node)
       python -m trainer.warm_start run [--ready-timeout S] [--] PYTHON ARGV...   (e.g. -m trainer.train --config ...)"""


def _options(args: list[str], known: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """Leading --key value pairs, then the command (after an optional --). By hand: argparse
    would take the command's own options (-m, --config) for ours."""
    opts = dict(known)
    while args and args[0] in opts:
        if len(args) < 2:
            raise SystemExit(f"warm_start: {args[0]} needs a value\n{USAGE}")
        opts[args[0]], args = args[1], args[2:]
    if args and args[0] == "--":
        args = args[1:]
    return opts, args


def _stop_kill_after() -> str:
    return os.environ.get("TRAINER_STOP_KILL_AFTER_S", "3")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    role, rest = (argv[0], argv[1:]) if argv else ("", [])
    if role == "node":
        opts, command = _options(rest, {"--preload": DEFAULT_PRELOAD, "--stop-kill-after": _stop_kill_after(),
                                        "--go": "", "--ready": ""})
        node(command, opts["--preload"], opts["--stop-kill-after"], opts["--go"], opts["--ready"])
    elif role == "serve":
        opts, _ = _options(rest, {"--fd": "", "--preload": DEFAULT_PRELOAD, "--stop-kill-after": _stop_kill_after(),
                                  "--ready": ""})
        if not opts["--fd"].isdigit():
            raise SystemExit(f"warm_start serve: --fd N (a listening socket) is required\n{USAGE}")
        try:
            kill_after = float(opts["--stop-kill-after"])
        except ValueError:
            raise SystemExit(f"warm_start serve: --stop-kill-after takes seconds, got {opts['--stop-kill-after']!r}")
        serve(int(opts["--fd"]), opts["--preload"], kill_after, opts["--ready"])
    elif role == "run":
        opts, command = _options(rest, {"--ready-timeout": "300"})
        if not command:
            raise SystemExit(f"warm_start run: give the python arguments\n{USAGE}")
        run(command, float(opts["--ready-timeout"]))
    else:
        raise SystemExit(USAGE)


if __name__ == "__main__":
    main()
