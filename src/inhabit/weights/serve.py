"""Serve a weight store read-only over HTTP, so subscribers can pull with fsspec's http filesystem.

    inhabit weights serve runs/weights --port 8470
    Subscriber("http://trainer:8470")            # anywhere that can reach the port

GET and HEAD only; directories answer with a plain HTML list of links (what fsspec's http
`ls` reads), files with their bytes. Paths are confined to the store root ('..' is refused). It
protects the store from being written through it; it does NOT authenticate or encrypt: bind it
to loopback or a private network (the default host is 127.0.0.1), or put a proxy in front.
"""

from __future__ import annotations

import html
import posixpath
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

from inhabit.log import get_logger
from inhabit.weights.store import Store

log = get_logger(__name__)


class _Handler(BaseHTTPRequestHandler):
    store: Store  # set on the subclass made per server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def _resolve(self) -> str | None:
        rel = unquote(urlsplit(self.path).path)
        norm = posixpath.normpath("/" + rel.lstrip("/"))
        if ".." in rel.split("/") or not norm.startswith("/"):
            return None
        tail = norm.strip("/")
        return self.store.root + ("/" + tail if tail else "")

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def do_GET(self) -> None:
        self._serve(body=True)

    def _refuse(self) -> None:
        self.send_error(HTTPStatus.METHOD_NOT_ALLOWED, "this store is served read-only")

    do_PUT = do_POST = do_DELETE = do_PATCH = _refuse

    def _serve(self, body: bool) -> None:
        path = self._resolve()
        fs = self.store.fs
        if path is None:
            self.send_error(HTTPStatus.FORBIDDEN, "path escapes the store")
            return
        try:
            if fs.isdir(path):
                data = self._listing(path)
                ctype = "text/html; charset=utf-8"
            else:
                data = fs.cat_file(path)
                ctype = "application/octet-stream"
        except FileNotFoundError:
            self.send_error(HTTPStatus.NOT_FOUND)
            return
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)

    def _listing(self, path: str) -> bytes:
        base = self.path if self.path.endswith("/") else self.path + "/"
        rows = []
        for entry in sorted(self.store.fs.ls(path, detail=True), key=lambda e: e["name"]):
            name = str(entry["name"]).rstrip("/").rsplit("/", 1)[-1]
            if entry.get("type") == "directory":
                name += "/"
            rows.append(f'<a href="{html.escape(base + name)}">{html.escape(name)}</a><br>')
        return ("<html><body>\n" + "\n".join(rows) + "\n</body></html>\n").encode()


class StoreServer:
    """A threaded HTTP server over one store; `start()` runs it in a daemon thread."""

    def __init__(self, store: Store | str, host: str = "127.0.0.1", port: int = 0) -> None:
        self.store = store if isinstance(store, Store) else Store(store)
        handler = type("StoreHandler", (_Handler,), {"store": self.store})
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> StoreServer:
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="weights-serve", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
