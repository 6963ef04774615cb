"""The admin HTTP server: /metrics for Prometheus and JSON status under /amps (GET), and the
few administrator actions under /amps/administrator (POST).

A small asyncio HTTP/1.1 responder; the admin surface is a handful of read-only paths, which does
not justify a web framework dependency.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl as ssl_module
import urllib.parse
from collections.abc import Awaitable, Callable

import orjson

from amps.server.admin_auth import REALM, AdminGuard

log = logging.getLogger("amps.admin")

MAX_REQUEST_BYTES = 8192
Route = Callable[[], tuple[str, bytes]]
PrefixRoute = Callable[[str], tuple[int, str, bytes]]
"""(rest of the path after the prefix, percent-decoded) -> (status, content type, body)."""
ActionRoute = Callable[[str], Awaitable[tuple[int, str, bytes]]]
"""POST, for actions that wait (file I/O): as PrefixRoute, with the `?query` kept."""


def _header(head: bytes, name: bytes) -> str | None:
    """The value of one request header (names are case-insensitive), or None."""
    for line in head.split(b"\r\n")[1:]:
        key, colon, value = line.partition(b":")
        if colon and key.strip().lower() == name:
            return value.strip().decode("latin-1")
    return None


class AdminHttpServer:
    """Serves routes: path -> () -> (content type, body); and prefixes for paths with an id.

    An exact route wins; otherwise the longest prefix that the path starts with answers.
    """

    def __init__(
        self,
        routes: dict[str, Route],
        prefixes: dict[str, PrefixRoute] | None = None,
        post_prefixes: dict[str, PrefixRoute] | None = None,
        actions: dict[str, ActionRoute] | None = None,
        guard: AdminGuard | None = None,
    ) -> None:
        self.routes = routes
        self.prefixes = dict(prefixes or {})
        self.post_prefixes = dict(post_prefixes or {})
        self.actions = dict(actions or {})
        # With authentication on: who may read statistics and who may change things.
        self.guard = guard
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int, *, ssl: ssl_module.SSLContext | None = None) -> int:
        """Listen (over TLS when given a context); returns the bound port (0 picks a free one)."""
        if ssl is None:
            self._server = await asyncio.start_server(self._handle, host, port)
        else:
            self._server = await asyncio.start_server(
                self._handle, host, port, ssl=ssl, ssl_handshake_timeout=10
            )
        sock = self._server.sockets[0]
        return int(sock.getsockname()[1])

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
            if len(head) > MAX_REQUEST_BYTES:
                await self._respond(writer, 431, "text/plain", b"request header too large\n")
                return
            request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
            parts = request_line.split(" ")
            if len(parts) != 3:
                await self._respond(writer, 400, "text/plain", b"bad request line\n")
                return
            method, target, _ = parts
            path, _, query = target.partition("?")
            if method == "GET" and self._is_action(path):
                # Changes are POST only: a GET (a link, an image tag) must never act (CSRF).
                body = b"this path changes the instance: use POST\n"
                await self._respond(writer, 405, "text/plain", body, ("Allow: POST",))
                return
            if self.guard is not None:
                peer = writer.get_extra_info("peername")
                where = f"http:{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "http:?:0"
                refused = await self.guard.refusal(
                    where, path, _header(head, b"authorization"), change=method == "POST"
                )
                if refused is not None:
                    status, text = refused
                    extra = (f"WWW-Authenticate: {REALM}",) if status == 401 else ()
                    await self._respond(writer, status, "text/plain", text, extra)
                    return
            if method == "POST" and (self.post_prefixes or self.actions):
                await self._post(writer, path, query)
                return
            if method != "GET":
                await self._respond(writer, 405, "text/plain", b"only GET is supported\n")
                return
            route = self.routes.get(path)
            if route is not None:
                content_type, body = route()
                await self._respond(writer, 200, content_type, body)
                return
            for prefix in sorted(self.prefixes, key=len, reverse=True):
                if path.startswith(prefix) and len(path) > len(prefix):
                    rest = urllib.parse.unquote(path[len(prefix) :])
                    status, content_type, body = self.prefixes[prefix](rest)
                    await self._respond(writer, status, content_type, body)
                    return
            paths = sorted([*self.routes, *(f"{p}<id>" for p in self.prefixes)])
            body = orjson.dumps({"error": f"no such path {path}", "paths": paths})
            await self._respond(writer, 404, "application/json", body)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            pass
        except (ConnectionError, ssl_module.SSLError):
            pass
        except Exception:
            log.exception("admin request failed")
            await self._respond(writer, 500, "text/plain", b"internal error\n")
        finally:
            writer.close()

    def _is_action(self, path: str) -> bool:
        prefixes = [*self.post_prefixes, *self.actions]
        return any(path.startswith(prefix) and len(path) > len(prefix) for prefix in prefixes)

    async def _post(self, writer: asyncio.StreamWriter, path: str, query: str) -> None:
        for prefix in sorted(self.post_prefixes, key=len, reverse=True):
            if path.startswith(prefix) and len(path) > len(prefix):
                rest = urllib.parse.unquote(path[len(prefix) :])
                status, content_type, body = self.post_prefixes[prefix](rest)
                await self._respond(writer, status, content_type, body)
                return
        for prefix, action in self.actions.items():
            if path.startswith(prefix) and len(path) > len(prefix):
                rest = urllib.parse.unquote(path[len(prefix) :])
                status, content_type, body = await action(f"{rest}?{query}" if query else rest)
                await self._respond(writer, status, content_type, body)
                return
        paths = sorted(f"{p}<id>" for p in [*self.post_prefixes, *self.actions])
        body = orjson.dumps({"error": f"no POST path {path}", "paths": paths})
        await self._respond(writer, 404, "application/json", body)

    @staticmethod
    async def _respond(
        writer: asyncio.StreamWriter,
        status: int,
        content_type: str,
        body: bytes,
        headers: tuple[str, ...] = (),
    ) -> None:
        reason = {
            200: "OK",
            400: "Bad Request",
            401: "Unauthorized",
            403: "Forbidden",
            404: "Not Found",
            405: "Method Not Allowed",
            409: "Conflict",
            431: "Request Header Fields Too Large",
            500: "Internal Server Error",
        }[status]
        header = (
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n"
            + "".join(f"{line}\r\n" for line in headers)
            + "\r\n"
        ).encode("latin-1")
        writer.write(header + body)
        with contextlib.suppress(ConnectionError):
            await writer.drain()
