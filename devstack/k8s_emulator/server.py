"""HTTP/1.1 plumbing: routing to Api, auth, fault injection, request log, chunked watch streams."""

from __future__ import annotations

import contextlib
import json
import queue
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from . import kinds, reviews, tables
from .api import Request, Response, WatchStream
from .errors import ApiError, status_body

if TYPE_CHECKING:
    from .emulator import Emulator

ANONYMOUS = "system:anonymous"


class EmulatorHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], emulator: Emulator) -> None:
        self.emulator = emulator
        self.connections: set[socket.socket] = set()
        self.conn_lock = threading.Lock()
        super().__init__(address, Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # aborted connections / failed TLS handshakes are routine in tests

    def close_connections(self) -> None:
        with self.conn_lock:
            conns = list(self.connections)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


def _encode(body: Any) -> bytes:
    if isinstance(body, str):
        return body.encode()
    return (json.dumps(body, separators=(",", ":")) + "\n").encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: EmulatorHTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the structured request log replaces stderr access logs

    def setup(self) -> None:
        if isinstance(self.request, ssl.SSLSocket):
            self.request.settimeout(10)
            self.request.do_handshake()
            self.request.settimeout(None)
        super().setup()
        # Small request/response pairs otherwise stall on Nagle + delayed ACK (~40 ms each).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.server.conn_lock:
            self.server.connections.add(self.connection)

    def finish(self) -> None:
        with self.server.conn_lock:
            self.server.connections.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def do_PATCH(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    # ------------------------------------------------------------------ request handling

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _user(self) -> str | None:
        emu = self.server.emulator
        header = self.headers.get("Authorization", "")
        token = header[7:].strip() if header.lower().startswith("bearer ") else ""
        user = emu.tokens.get(token) if token else None
        if token and user is None and emu.token_validator is not None:
            try:
                user = emu.token_validator(token)
            except Exception:
                user = None
        if user is None and not emu.require_token:
            return ANONYMOUS
        return user

    def _dispatch(self) -> None:
        emu = self.server.emulator
        started = time.time()
        url = urlsplit(self.path)
        body = self._read_body()
        if url.path.startswith("/_emulator/"):
            self._control(url.path, body)
            return
        query = dict(parse_qsl(url.query, keep_blank_values=True))
        is_watch = query.get("watch") in ("1", "true", "True") or "/watch/" in url.path
        entry: dict[str, Any] = {
            "method": self.command,
            "path": url.path,
            "query": url.query,
            "status": 0,
            "bytes": 0,
            "user": None,
            "time": started,
            "watch": is_watch,
        }
        if emu.faults.latency_ms:
            time.sleep(emu.faults.latency_ms / 1000.0)
        try:
            user = self._user()
            entry["user"] = user
            if user is None:
                raise ApiError(401, "Unauthorized", "Unauthorized")
            if emu.rbac is not None:
                emu.rbac.authorize(user, self.command, url.path, query)
            injected = emu.faults.take(self.command, url.path)
            if injected is not None:
                raise _injected(injected)
            if self.command == "POST" and url.path == reviews.PATH:
                self._send(reviews.review(emu, body), entry)
                return
            req = Request(
                self.command,
                url.path,
                query,
                self.headers.get("Accept", "application/json"),
                self.headers.get("Content-Type", "application/json"),
                body,
                self.headers.get("User-Agent", ""),
            )
            result = emu.api.handle(req)
        except ApiError as exc:
            result = Response(exc.code, exc.status(), exc.headers)
        except Exception as exc:  # a bug in the emulator must still produce a Status, not a hung client
            result = Response(500, status_body(500, f"emulator error: {exc!r}", "InternalError"))
        if isinstance(result, WatchStream):
            self._stream(result, entry)
        else:
            self._send(result, entry)

    def _send(self, resp: Response, entry: dict[str, Any] | None = None) -> None:
        payload = _encode(resp.body)
        if entry is not None:
            # Logged before the bytes go out, so a client that has the response also sees the entry.
            entry["status"], entry["bytes"] = resp.status, len(payload)
            self.server.emulator.request_log.record(entry)
        self.send_response(resp.status)
        ctype = "text/plain; charset=utf-8" if isinstance(resp.body, str) else "application/json"
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Cache-Control", "no-cache, private")
        for name, value in resp.headers.items():
            self.send_header(name, value)
        try:
            self.end_headers()
            self.wfile.write(payload)
        except OSError:
            self.close_connection = True

    # ------------------------------------------------------------------ watch streaming

    def _client_gone(self) -> bool:
        # Clients never send anything while a watch response is streaming, so readability means EOF
        # (or a TLS close_notify, which cannot be peeked at).
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return False
            if isinstance(self.connection, ssl.SSLSocket):
                return True
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    def _event_bytes(self, ws: WatchStream, etype: str, payload: Any, first: bool) -> bytes:
        res = ws.res
        if etype == "BOOKMARK":
            rv, initial_end = payload
            meta: dict[str, Any] = {"resourceVersion": str(rv)}
            if initial_end:
                meta["annotations"] = {"k8s.io/initial-events-end": "true"}
            obj: dict[str, Any] = {"kind": res.kind, "apiVersion": res.api_version, "metadata": meta}
        elif etype == "ERROR":
            obj = payload
        else:
            obj = kinds.from_storage(res, payload)
            if ws.table:
                meta = {"resourceVersion": obj["metadata"].get("resourceVersion", "")}
                obj = tables.to_table(res, [obj], meta, ws.include, headers=first)
        return _encode({"type": etype, "object": obj})

    def _stream(self, ws: WatchStream, entry: dict[str, Any]) -> None:
        emu = self.server.emulator
        entry["status"] = 200
        emu.request_log.record(entry)  # visible while streaming; bytes are filled in when it ends
        sent = 0
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Cache-Control", "no-cache, private")
            self.end_headers()
            deadline = time.monotonic() + ws.timeout if ws.timeout else None
            next_bookmark = _next_bookmark(time.monotonic(), deadline, emu.bookmark_interval) if ws.bookmarks else None
            first = True
            while True:
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    break
                if next_bookmark is not None and now >= next_bookmark:
                    emu.store.request_bookmark(ws.watcher)
                    next_bookmark = _next_bookmark(now, deadline, emu.bookmark_interval)
                waits = [0.25] + [t - now for t in (deadline, next_bookmark) if t is not None]
                try:
                    item = ws.watcher.queue.get(timeout=max(0.0, min(waits)))
                except queue.Empty:
                    if emu.stopping or self._client_gone():
                        break
                    continue
                if item is None:
                    break
                if item[0] == "ABORT":
                    # A dying server: no terminal chunk, the connection just goes away.
                    emu.request_log.update_entry(entry, bytes=sent)
                    self.close_connection = True
                    with contextlib.suppress(OSError):
                        self.wfile.flush()
                        self.connection.shutdown(socket.SHUT_RDWR)
                    return
                data = self._event_bytes(ws, item[0], item[1], first)
                first = first and item[0] not in ("ADDED", "MODIFIED", "DELETED")
                self._write_chunk(data)
                sent += len(data)
            # Logged before the end goes out, so a client that saw the end also sees the final byte count.
            emu.request_log.update_entry(entry, bytes=sent)
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            self.close_connection = True
        finally:
            emu.store.unwatch(ws.watcher)
            emu.request_log.update_entry(entry, bytes=sent)
            if emu.stopping:
                self.close_connection = True

    # ------------------------------------------------------------------ control endpoints

    def _control(self, path: str, body: bytes) -> None:
        emu = self.server.emulator
        try:
            args = json.loads(body) if body else {}
        except ValueError:
            self._send(Response(400, status_body(400, "invalid JSON")))
            return
        route = (self.command, path.rstrip("/"))
        handlers: dict[tuple[str, str], Callable[[], Any]] = {
            ("POST", "/_emulator/faults"): lambda: emu.faults.fail_next(
                args.get("n", 1), args.get("status", 500), args.get("method"), args.get("path_regex")
            ),
            ("DELETE", "/_emulator/faults"): emu.faults.clear,
            ("POST", "/_emulator/latency"): lambda: emu.faults.latency(args.get("ms", 0)),
            ("POST", "/_emulator/drop-watches"): lambda: {"dropped": emu.drop_watches(bool(args.get("clean")))},
            ("POST", "/_emulator/compact"): emu.compact,
            ("GET", "/_emulator/requests"): emu.request_log.snapshot,
            ("DELETE", "/_emulator/requests"): emu.clear_log,
        }
        handler = handlers.get(route)
        if handler is None:
            self._send(Response(404, status_body(404, f"no emulator control endpoint {route[0]} {route[1]}")))
            return
        result = handler()
        self._send(Response(200, result if result is not None else {"ok": True}))


def _next_bookmark(now: float, deadline: float | None, interval: float) -> float | None:
    """When the watch cache sends the next bookmark (apiserver storage/cacher cacheWatcher.nextBookmarkTime): every
    ``interval`` (bookmarkFrequency, one minute), and 2 s before the watch's deadline when that comes first; none
    once that moment has passed."""
    at = now + interval
    if deadline is not None and deadline < at:
        at = deadline - 2.0
        if at <= now:
            return None
    return at


def _injected(code: int) -> ApiError:
    headers = {"Retry-After": "1"} if code == 429 else {}
    details = {"retryAfterSeconds": 1} if code == 429 else None
    messages = {
        429: "Too many requests, please try again later.",
        409: "injected conflict",
        500: "Internal error occurred: injected fault",
        503: "injected: service unavailable",
    }
    return ApiError(code, messages.get(code, f"injected fault {code}"), details=details, headers=headers)
