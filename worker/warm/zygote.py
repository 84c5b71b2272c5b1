"""The zygote: a process that has imported a template's modules and forks a fresh child per
request. Started by ``worker.warm.client`` (never by hand); one per node, kind and template.

The template (this process) imports its modules and then runs nothing: no torch op, no
thread of ours, no CUDA (checked after every import: a module that initialises CUDA makes
the zygote refuse to start, since a child of a process that did cannot use the GPU), no
process group, no job's data (a request is JSON; nothing a job sends is unpickled here).
Every child is a fresh copy of that state, so nothing of an earlier job can reach a later
one: each job's module globals, RNG seeds, environment, open files and process groups die
with its child.

Lifetime: serves until the process it watches (the node's raylet) exits, until it has had
no requester and no child for ``idle_s``, or until SIGTERM; then it SIGKILLs its children.
A child dies with its requester: the zygote SIGKILLs it when the requester's control
connection closes (the requester exited or was killed), and the kernel SIGKILLs it when the
zygote itself dies (``PR_SET_PDEATHSIG``).

One request on a control connection: ``{"op": "spawn", "target": "module:function", "env",
"cwd", "path", "argv"}`` with three descriptors (the channel, stdout, stderr); the answer is
``{"pid": n}``, and once the child has exited ``{"exit": code}`` or ``{"signal": n}``.

Run as ``python -c <bootstrap> <config JSON>`` (``worker.warm.client.start``); it detaches
from its starter (a second fork, its own session) so that Ray, which kills the children of a
worker process when it exits, does not take the zygote with the first worker that started it.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import os
import selectors
import signal
import socket
import struct
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from worker.warm.protocol import ProtocolError, carry, recv_json, send_json, send_obj

__all__ = ["main"]

_PR_SET_PDEATHSIG = 1
_NOT_INITIALIZED = 3  # CUDA_ERROR_NOT_INITIALIZED: cuInit has not run in this process


@dataclass(kw_only=True)
class _Config:
    socket: str  # where to listen (bound under a temporary name, renamed once listening)
    modules: list[str]  # the template
    path: list[str]  # sys.path while importing (the starter's)
    watch_pid: int | None  # exit when this process (the raylet) exits
    idle_s: float


@dataclass(kw_only=True)
class _Conn:
    sock: socket.socket
    child: int | None = None


@dataclass(kw_only=True)
class _Server:
    listener: socket.socket
    selector: selectors.BaseSelector
    wakeup: tuple[int, int]  # the signal wakeup pipe
    watch_fd: int | None
    conns: dict[int, _Conn] = field(default_factory=dict)  # by socket fd
    children: dict[int, _Conn] = field(default_factory=dict)  # by child pid
    stopping: bool = False


def _cuda_touched() -> bool:
    """Whether this process initialised CUDA: torch's lazy init, or the driver's ``cuInit``
    (which ``torch.cuda.is_available()`` calls unless NVML answers). A CUDA build of torch
    maps the driver library at import; asking it for the device count tells initialised
    (0) from not (``CUDA_ERROR_NOT_INITIALIZED``) without initialising it."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return True
    with open("/proc/self/maps") as fh:
        libcuda = next((ln.split()[-1] for ln in fh if "/libcuda.so" in ln), None)
    if libcuda is None:
        return False
    count = ctypes.c_int()
    return int(ctypes.CDLL(libcuda).cuDeviceGetCount(ctypes.byref(count))) != _NOT_INITIALIZED


def _import_template(modules: list[str]) -> None:
    for name in modules:
        importlib.import_module(name)
        if _cuda_touched():
            raise RuntimeError(f"importing {name} initialised CUDA: children could not use it")


# -- the child ------------------------------------------------------------------------------
def _close_server(server: _Server) -> None:
    """In a child: close its copies of the zygote's descriptors (the zygote keeps its own)."""
    signal.set_wakeup_fd(-1)
    server.selector.close()
    server.listener.close()
    for conn in server.conns.values():
        conn.sock.close()
    for fd in (*server.wakeup, *((server.watch_fd,) if server.watch_fd is not None else ())):
        os.close(fd)


def _enter_child(server: _Server, zygote: int, req: dict[str, Any], fds: list[int]) -> None:
    """Turn this fork into the requester's process: its stdio, environment, cwd, sys.path."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != zygote:  # the zygote died between fork and prctl
        os._exit(1)
    for sig in (signal.SIGCHLD, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _close_server(server)
    _channel, out, err = fds
    null = os.open(os.devnull, os.O_RDONLY)
    for src, dst in ((null, 0), (out, 1), (err, 2)):
        os.dup2(src, dst)
        os.close(src)
    os.environ.clear()
    os.environ.update(req["env"])
    os.chdir(req["cwd"])
    sys.path[:] = req["path"]
    sys.argv[:] = req["argv"]
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError):
            stream.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    _reseed()


def _reseed() -> None:
    """Fresh seeds, as a new process has: no two children (no two jobs) draw the same numbers
    from a generator they did not seed. CPython reseeds ``random`` itself after a fork."""
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.seed()  # from the OS; CUDA's generators are seeded lazily, at CUDA init


def _run_child(server: _Server, zygote: int, req: dict[str, Any], fds: list[int]) -> None:
    """The child's whole life; never returns into the zygote's frames."""
    code = 1
    channel: socket.socket | None = None
    try:
        _enter_child(server, zygote, req, fds)
        channel = socket.socket(fileno=fds[0])
        module, _, name = str(req["target"]).partition(":")
        fn = getattr(importlib.import_module(module), name)
        try:
            result = fn(channel)
        except BaseException as e:  # the requester raises it, its traceback as a note
            send_obj(channel, ("failed", carry(e)))
        else:
            send_obj(channel, ("done", result))
            code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            import atexit

            atexit._run_exitfuncs()  # what a normal exit of a fresh process runs
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


# -- the server -----------------------------------------------------------------------------
def _spawn(server: _Server, conn: _Conn) -> None:
    req, fds = recv_json(conn.sock, with_fds=True)
    if req.get("op") != "spawn" or len(fds) != 3 or conn.child is not None:
        for fd in fds:
            os.close(fd)
        raise ProtocolError(f"bad request {req.get('op')!r} with {len(fds)} descriptors")
    sys.stdout.flush()
    sys.stderr.flush()
    zygote = os.getpid()
    pid = os.fork()
    if pid == 0:
        _run_child(server, zygote, req, fds)
    for fd in fds:
        os.close(fd)
    conn.child = pid
    server.children[pid] = conn
    send_json(conn.sock, {"pid": pid})


def _drop(server: _Server, conn: _Conn) -> None:
    """The requester is gone (or misbehaved): its child must not outlive it."""
    server.selector.unregister(conn.sock)
    server.conns.pop(conn.sock.fileno(), None)
    if conn.child is not None and conn.child in server.children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(conn.child, signal.SIGKILL)
    conn.sock.close()


def _reap(server: _Server) -> None:
    while server.children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = server.children.pop(pid, None)
        if conn is None:
            continue
        if os.WIFSIGNALED(status):
            doc = {"signal": os.WTERMSIG(status)}
        else:
            doc = {"exit": os.waitstatus_to_exitcode(status)}
        with contextlib.suppress(OSError):
            send_json(conn.sock, doc)
        if conn.sock.fileno() in server.conns:
            _drop(server, conn)


def _on_readable(server: _Server, what: str | _Conn) -> None:
    if what == "listener":
        sock, _ = server.listener.accept()
        uid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]
        if uid != os.getuid():  # the socket's directory is private; this is a second lock
            sock.close()
            return
        conn = _Conn(sock=sock)
        server.conns[sock.fileno()] = conn
        server.selector.register(sock, selectors.EVENT_READ, conn)
    elif what == "signal":
        with contextlib.suppress(BlockingIOError):
            os.read(server.wakeup[0], 512)
        _reap(server)
    elif what == "watch":
        server.stopping = True
    elif isinstance(what, _Conn):
        if what.child is not None:  # after a spawn the requester only ever closes
            _drop(server, what)
            return
        try:
            _spawn(server, what)
        except (OSError, ProtocolError, ValueError) as e:
            print(f"zygote: dropped a request: {e}", flush=True)
            _drop(server, what)


def _watch(pid: int | None) -> int | None:
    """A descriptor that becomes readable when ``pid`` exits (None: none to be had; the
    serve loop then checks ``pid`` once a second)."""
    if pid is None:
        return None
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        raise RuntimeError(f"the process to watch ({pid}) is already gone") from None
    except OSError:  # no pidfd in this kernel (gVisor, Linux < 5.3)
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _serve(cfg: _Config, listener: socket.socket, inode: int) -> None:
    rfd, wfd = os.pipe()
    os.set_blocking(rfd, False)
    os.set_blocking(wfd, False)
    server = _Server(
        listener=listener,
        selector=selectors.DefaultSelector(),
        wakeup=(rfd, wfd),
        watch_fd=_watch(cfg.watch_pid),
    )
    signal.set_wakeup_fd(wfd)
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _on_signal)
    server.selector.register(listener, selectors.EVENT_READ, "listener")
    server.selector.register(rfd, selectors.EVENT_READ, "signal")
    if server.watch_fd is not None:
        server.selector.register(server.watch_fd, selectors.EVENT_READ, "watch")
    idle_since = time.monotonic()
    try:
        while not server.stopping and not _STOP:
            for key, _ in server.selector.select(timeout=1.0):
                _on_readable(server, key.data)
            if server.watch_fd is None and cfg.watch_pid is not None and not _alive(cfg.watch_pid):
                break
            if server.conns or server.children:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > cfg.idle_s:
                print(f"zygote: idle for {cfg.idle_s:.0f} s: exiting", flush=True)
                break
    finally:
        for pid in list(server.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _remove_files(cfg.socket, inode)


_STOP = False


def _on_signal(signum: int, _frame: Any) -> None:
    global _STOP
    if signum != signal.SIGCHLD:
        _STOP = True


def _remove_files(path: str, inode: int) -> None:
    """Remove the socket file (unless a newer zygote has taken the name since) and the log."""
    with contextlib.suppress(OSError):
        if os.stat(path).st_ino == inode:
            os.unlink(path)
            os.unlink(path.removesuffix(".sock") + ".log")


def _listen(path: str) -> tuple[socket.socket, int]:
    """Listen on ``path`` (the name appears only once the socket accepts connections); the
    socket and the inode of its file."""
    tmp = f"{path}.{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(tmp)
    listener.listen(64)
    inode = os.stat(tmp).st_ino
    os.replace(tmp, path)
    return listener, inode


def main(argv: list[str]) -> None:
    """``argv``: the config JSON and the descriptor of the starter's readiness pipe."""
    import json

    cfg = _Config(**json.loads(argv[0]))
    ready = int(argv[1])
    if os.fork():  # detach: the starter reaps this first process at once
        os._exit(0)
    try:
        sys.path[:] = cfg.path
        started = time.monotonic()
        _import_template(cfg.modules)
        listener, inode = _listen(cfg.socket)
    except BaseException as e:
        traceback.print_exc()
        os.write(ready, f"error: {type(e).__name__}: {e}".encode()[:4000])
        os._exit(1)
    print(
        f"zygote {os.getpid()}: {len(cfg.modules)} modules imported in "
        f"{time.monotonic() - started:.1f} s; listening on {cfg.socket}",
        flush=True,
    )
    os.write(ready, b"ok")
    os.close(ready)
    _serve(cfg, listener, inode)
    os._exit(0)
