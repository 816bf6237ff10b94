"""A TCP proxy on 127.0.0.1 whose faults can be switched while it runs (asyncio, on a thread of its own).

Modes (``set(mode, delay_s)``; a switch also cuts the connections open at that moment, so keep-alive connections
meet the new fault at once):

- ``pass``      forward both ways;
- ``delay``     forward, but hold the first bytes of every answer ``delay_s`` seconds (a slow control plane);
- ``reset``     accept, then reset the connection at once (RST);
- ``blackhole`` accept and read, never answer;
- ``refuse``    stop listening: connections are refused (same port when another mode comes back).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Coroutine
from typing import Any

MODES = ("pass", "delay", "reset", "blackhole", "refuse")


class FaultyProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.mode = "pass"
        self.delay_s = 0.0
        self.port = 0
        self.connections = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="faulty-proxy", daemon=True)
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)

    def start(self) -> FaultyProxy:
        self._thread.start()
        self._call(self._listen())
        return self

    def set(self, mode: str, delay_s: float = 0.0) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self._call(self._switch(mode, delay_s))

    def stop(self) -> None:
        if self._thread.is_alive():
            self._call(self._switch("refuse", 0.0))
            self._call(self._end_handlers())   # none left pending when the loop stops ("Task was destroyed")
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)

    # --- on the proxy's loop ---------------------------------------------------------------------------------

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _switch(self, mode: str, delay_s: float) -> None:
        self.mode, self.delay_s = mode, delay_s
        for writer in list(self._open):
            _reset(writer)
        self._open.clear()
        if mode == "refuse" and self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        elif mode != "refuse" and self._server is None:
            await self._listen()

    async def _end_handlers(self) -> None:
        handlers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        if self.mode == "reset":
            _reset(writer)
            return
        self._open.add(writer)
        try:
            if self.mode == "blackhole":
                while await reader.read(65536):
                    pass
                return
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            _reset(writer)
            return
        asked = asyncio.Event()   # set when the client sent something the server has not answered yet

        async def upstream() -> None:
            while data := await reader.read(65536):
                asked.set()
                up_writer.write(data)
                await up_writer.drain()
            up_writer.close()

        async def downstream() -> None:
            while data := await up_reader.read(65536):
                if asked.is_set() and self.mode == "delay":
                    await asyncio.sleep(self.delay_s)      # the first bytes of this answer
                asked.clear()
                writer.write(data)
                await writer.drain()
            writer.close()

        try:
            await asyncio.gather(upstream(), downstream())
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self._open.discard(writer)
            up_writer.close()
            writer.close()


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close -> RST
    writer.close()
