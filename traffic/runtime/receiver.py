"""An agent's receiving side: every accepted connection's frames are decoded, recorded and acked."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Protocol

from traffic.runtime.wire import ACK, ACK_MAGIC, FrameDecoder, FrameError, Received

RECV_BUFFER_BYTES = 262_144


class FrameSink(Protocol):
    """What a receiver reports to: its agent."""

    connections: set
    recv_buffer: memoryview

    def record_recv(self, frame: Received, peer: str, local: str) -> None: ...



class Receiver(asyncio.BufferedProtocol):
    """One accepted connection. Reads land in the agent's one shared buffer, which is
    safe because asyncio calls buffer_updated right after recv_into, and the decoder
    consumes the bytes before returning (no per-connection buffer to allocate)."""

    def __init__(self, agent: FrameSink, local: str) -> None:
        self._agent = agent
        self._local = local
        self._decoder = FrameDecoder()
        self._transport: asyncio.Transport | None = None
        self._peer = ""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # acks must not wait for Nagle
        peer = transport.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self._agent.connections.add(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._agent.recv_buffer

    def buffer_updated(self, nbytes: int) -> None:
        now = time.monotonic()
        try:
            frames = self._decoder.feed(self._agent.recv_buffer[:nbytes], now)
        except FrameError as exc:
            self._agent.record_recv(Received(None, None, 0, False, now, now, str(exc)),
                                    self._peer, self._local)
            self.stop("bad frame")
            return
        assert self._transport is not None
        if not frames:
            return
        # the acks first, in one write: a hosted agent's report may set off a phase's sends in record_recv
        self._transport.write(b"".join(ACK.pack(ACK_MAGIC, f.id, f.received, f.crc_ok) for f in frames))
        for frame in frames:
            self._agent.record_recv(frame, self._peer, self._local)

    def eof_received(self) -> bool:
        self._finish("connection closed")
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._finish(f"connection lost ({exc})" if exc else "connection closed")
        self._agent.connections.discard(self)

    def stop(self, why: str) -> None:
        """Record a frame cut short by ``why`` and close the connection."""
        self._finish(why)
        if self._transport is not None:
            self._transport.close()

    def _finish(self, why: str) -> None:
        cut = self._decoder.close(time.monotonic(), why)
        if cut is not None:
            self._agent.record_recv(cut, self._peer, self._local)
