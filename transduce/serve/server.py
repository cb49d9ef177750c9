"""Running the app under uvicorn: `serve` in the foreground (the CLI), or `Background` in a thread
of this process, on loopback (the tests and the load benchmark)."""

from __future__ import annotations

import socket
import threading
import time

import uvicorn

from .app import create_app
from .engine import Engine
from .settings import ServeSettings
from .worker import DecoderProcess

# Idle keep-alive connections are closed after this long: long enough that a client's next request
# seldom meets the server closing its connection (which the client sees as an error).
KEEP_ALIVE_S = 30


def serve(engine: Engine | DecoderProcess, settings: ServeSettings, quiet: bool = False) -> None:
    """Serve until interrupted, then stop the engine's decoding process if it has one; `quiet`:
    warnings only, no line per request."""
    try:
        uvicorn.run(
            create_app(engine, settings),
            host=settings.host,
            port=settings.port,
            log_level="warning" if quiet else "info",
            access_log=not quiet,
            timeout_keep_alive=KEEP_ALIVE_S,
        )
    finally:
        if isinstance(engine, DecoderProcess):
            engine.close()


class Background:
    """`with Background(engine, settings) as url:` the server answers at `url` until the block
    ends (the settings' port 0: a free one)."""

    def __init__(
        self, engine: Engine | DecoderProcess, settings: ServeSettings | None = None
    ) -> None:
        self.settings = settings or ServeSettings(port=0)
        self.app = create_app(engine, self.settings)
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            timeout_keep_alive=KEEP_ALIVE_S,
            timeout_graceful_shutdown=5,
        )
        self._server = uvicorn.Server(config)
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((self.settings.host, self.settings.port))
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._socket.getsockname()[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> str:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.__exit__()  # the with statement calls it only once __enter__ has returned
                raise RuntimeError("the server did not start")
            time.sleep(0.01)
        return self.url

    def __exit__(self, *exc_info: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)
        self._socket.close()
