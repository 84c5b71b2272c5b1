"""Messages between a zygote, the processes that ask it for children, and those children.

Two kinds of connection, both unix stream sockets:

- **control** (requester <-> zygote): JSON messages, each a 4-byte big-endian length and the
  body; a ``spawn`` request carries file descriptors (``SCM_RIGHTS``) on its first byte.
  Nothing a job sends is ever unpickled in the zygote: its state must stay the template's.
- **channel** (requester <-> child, a ``socketpair`` whose far end the zygote hands the
  child): pickled messages, each an 8-byte length and the body. Both ends are our own
  processes of the same user, so pickle is the job's own data going to itself.

``carry(exc)`` / ``uncarry(doc)`` move the exception that ended a child to its requester the
way Ray moves a worker's exception to the driver (type, args and ``__dict__``, by pickle; no
``__traceback__``, no ``__cause__``), with the child's formatted traceback added as a note
(``__notes__``: printed with the exception, never part of its message), so that
``worker.classify`` sees what it sees from a worker that trained in its own process.
"""

from __future__ import annotations

import json
import pickle
import socket
import struct
import traceback
from typing import Any

__all__ = [
    "ChildFailed",
    "ProtocolError",
    "carry",
    "recv_json",
    "recv_obj",
    "send_json",
    "send_obj",
    "uncarry",
]

_MAX_JSON = 16 << 20  # a spawn request is the environment and sys.path: kilobytes
_MAX_FDS = 8


class ProtocolError(ConnectionError):
    """The peer closed the connection or sent something that is not a message."""


class ChildFailed(RuntimeError):
    """A child's exception that could not be carried as itself (it does not pickle)."""


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise ProtocolError("connection closed")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def send_json(sock: socket.socket, doc: dict[str, Any], fds: list[int] | None = None) -> None:
    body = json.dumps(doc).encode()
    data = struct.pack(">I", len(body)) + body
    if fds:
        sent = socket.send_fds(sock, [data], fds)
        data = data[sent:]
    sock.sendall(data)


def recv_json(sock: socket.socket, *, with_fds: bool = False) -> tuple[dict[str, Any], list[int]]:
    """One JSON message and the descriptors that came with it (``with_fds``)."""
    fds: list[int] = []
    if with_fds:
        head, fds, _flags, _addr = socket.recv_fds(sock, 4, _MAX_FDS)
        if not head:
            raise ProtocolError("connection closed")
        head += _recv_exact(sock, 4 - len(head))
    else:
        head = _recv_exact(sock, 4)
    (size,) = struct.unpack(">I", head)
    if size > _MAX_JSON:
        raise ProtocolError(f"message of {size} bytes")
    doc = json.loads(_recv_exact(sock, size))
    if not isinstance(doc, dict):
        raise ProtocolError("a message is a JSON object")
    return doc, fds


def send_obj(sock: socket.socket, obj: Any) -> None:
    body = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(struct.pack(">Q", len(body)) + body)


def recv_obj(sock: socket.socket) -> Any:
    (size,) = struct.unpack(">Q", _recv_exact(sock, 8))
    return pickle.loads(_recv_exact(sock, size))


def carry(exc: BaseException) -> dict[str, Any]:
    """What a child sends up for the exception that ended it (see the module docstring)."""
    text = "".join(traceback.format_exception(exc))
    try:
        blob = pickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL)
        pickle.loads(blob)  # an exception whose __reduce__ does not round-trip is carried as text
    except Exception:
        blob = None
    return {"pickled": blob, "type": type(exc).__name__, "message": str(exc), "traceback": text}


def uncarry(doc: dict[str, Any]) -> BaseException:
    """The exception a requester raises for its child's ``carry(exc)``."""
    exc: BaseException
    if doc.get("pickled") is not None:
        exc = pickle.loads(doc["pickled"])
    else:
        exc = ChildFailed(f"{doc['type']}: {doc['message']}")
    exc.add_note(f"raised in the warm training process:\n{doc['traceback']}")
    return exc
