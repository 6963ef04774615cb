"""A loopback TCP proxy that can cut, hold and release a link (tests/cluster).

`cut()` closes every connection and refuses new ones until `release()`; `hold()` keeps the
connections open but stops moving bytes (a stalled link) until `release()`.
"""

from __future__ import annotations

import asyncio
import contextlib


class LinkProxy:
    """Forwards 127.0.0.1:`port` to 127.0.0.1:`target_port`."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self._server: asyncio.Server | None = None
        self._open = asyncio.Event()
        self._open.set()
        self._refusing = False
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self, port: int = 0) -> LinkProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        self._refusing = True
        self._drop_all()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def cut(self) -> None:
        """Close every connection now and refuse new ones."""
        self._refusing = True
        self._drop_all()

    def hold(self) -> None:
        """Keep connections open, forward nothing."""
        self._open.clear()

    def release(self) -> None:
        """Forward again and accept new connections."""
        self._refusing = False
        self._open.set()

    def _drop_all(self) -> None:
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._refusing:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.ensure_future(self._pump(source, sink))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, ConnectionError):
            while True:
                data = await source.read(65536)
                if not data:
                    break
                await self._open.wait()
                if sink.transport.is_closing():
                    break
                sink.write(data)
                await sink.drain()
        sink.transport.abort()
        self._writers.discard(sink)
