"""A TCP proxy for tests that can cut the path it carries: ``StallProxy(target_port)``.

It listens on a free loopback port and forwards every connection to ``127.0.0.1:target``.
``cut()`` makes it a black hole, as a lost route does: nothing is forwarded either way and new
connections are accepted but never reach the target (clients see their own timeouts, not a
refusal); ``restore()`` forwards again. It runs its own asyncio loop on a daemon thread;
``close()`` ends it. No process is started.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

__all__ = ["StallProxy"]


class StallProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._open = asyncio.Event()
        self._ready = threading.Event()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._serve, name="stall-proxy", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> StallProxy:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the proxy did not start")
        return self

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._open.set()
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", 0)
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._open.wait()  # a connection made during a cut hangs here
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while True:
                data = await src.read(65536)
                await self._open.wait()  # held (never delivered while cut)
                if not data:
                    break
                dst.write(data)
                await dst.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                dst.close()

    def cut(self) -> None:
        self._loop.call_soon_threadsafe(self._open.clear)

    def restore(self) -> None:
        self._loop.call_soon_threadsafe(self._open.set)

    def close(self) -> None:
        self.restore()

        def _stop() -> None:
            if self._server is not None:
                self._server.close()
            self._loop.stop()

        self._loop.call_soon_threadsafe(_stop)
        self._thread.join(10)
