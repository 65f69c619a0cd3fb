"""An agent's receiving side: every accepted connection's frames are decoded, recorded and acked.

A frame's arrival is stamped with the kernel's receive time of the data that completed it (SO_TIMESTAMPNS:
when the last packet entered the receiving GPU's namespace, i.e. left the fabric's last queue), not with when
this process got round to reading it: a receiver that shares its loop with many others (``traffic.runtime.host``)
or waits for a core would otherwise stretch every exchange by its own wake-up. (The stamp is CLOCK_REALTIME;
it is moved onto CLOCK_MONOTONIC, which every time in the records is on, at each read.) Data that comes
without a stamp is stamped when it is read.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from typing import Protocol

from traffic.runtime.wire import ACK, ACK_MAGIC, FrameDecoder, FrameError, Received

RECV_BUFFER_BYTES = 262_144
SO_TIMESTAMPNS = 35  # Linux (SO_TIMESTAMPNS_OLD: a struct timespec of two longs on 64-bit)
TIMESPEC = struct.Struct("@ll")
ANC_BYTES = socket.CMSG_SPACE(TIMESPEC.size)
ACCEPT_PAUSE_S = 0.1


class FrameSink(Protocol):
    """What a receiver reports to: its agent."""

    connections: set
    recv_buffer: memoryview

    def record_recv(self, frame: Received, peer: str, local: str) -> None: ...


class Receiver(asyncio.BufferedProtocol):
    """One accepted connection. Reads land in the agent's one shared buffer, which is
    safe because asyncio calls buffer_updated right after recv_into, and the decoder
    consumes the bytes before returning (no per-connection buffer to allocate).
    (``SocketReceiver`` drives the same logic from its own socket with kernel stamps.)"""

    def __init__(self, agent: FrameSink, local: str) -> None:
        self._agent = agent
        self._local = local
        self._decoder = FrameDecoder()
        self._transport = None
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
        self._received(nbytes, time.monotonic())

    def _received(self, nbytes: int, now: float) -> None:
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


def kernel_stamp(anc: list) -> float | None:
    """CLOCK_MONOTONIC seconds of the SCM_TIMESTAMPNS in ``anc`` (recvmsg's ancillary data), or None."""
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= TIMESPEC.size:
            sec, nsec = TIMESPEC.unpack_from(data)
            return sec + nsec * 1e-9 - (time.time() - time.monotonic())
    return None


class SocketReceiver(Receiver):
    """A Receiver on an accepted socket of its own (a reader callback, recvmsg with the kernel's stamps); it
    is its own transport for the acks (a send, the rest when the socket takes it)."""

    def __init__(self, agent: FrameSink, local: str, sock: socket.socket, peer) -> None:
        super().__init__(agent, local)
        self._sock = sock
        self._out = b""
        self._loop = asyncio.get_running_loop()
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self._peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self._transport = self
        self._fd = sock.fileno()
        agent.connections.add(self)
        self._loop.add_reader(self._fd, self._readable)

    def _readable(self) -> None:
        buf = self._agent.recv_buffer
        try:
            n, anc, _flags, _ = self._sock.recvmsg_into([buf], ANC_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lost(f"connection lost ({exc})")
            return
        if n == 0:
            self._lost("connection closed")
            return
        stamp = kernel_stamp(anc)
        self._received(n, time.monotonic() if stamp is None else stamp)

    # -- the transport the protocol writes its acks to
    def write(self, data: bytes) -> None:
        if self._fd < 0:
            return
        if self._out:
            self._out += data
            return
        try:
            sent = self._sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            self._lost(f"connection lost ({exc})")
            return
        if sent < len(data):
            self._out = data[sent:]
            self._loop.add_writer(self._fd, self._flush)

    def _flush(self) -> None:
        try:
            sent = self._sock.send(self._out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lost(f"connection lost ({exc})")
            return
        self._out = self._out[sent:]
        if not self._out:
            self._loop.remove_writer(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            self._loop.remove_reader(self._fd)
            self._loop.remove_writer(self._fd)
            self._fd = -1
            self._sock.close()
        self._agent.connections.discard(self)

    def _lost(self, why: str) -> None:
        self._finish(why)
        self.close()


class Listener:
    """A listening socket that hands each accepted connection to a SocketReceiver (what ``create_server`` was
    to Receiver)."""

    def __init__(self, agent: FrameSink, local: str, sock: socket.socket) -> None:
        self.agent, self.local, self.sock = agent, local, sock
        self.sockets = [sock]
        self._loop = asyncio.get_running_loop()
        sock.setblocking(False)
        self._loop.add_reader(sock.fileno(), self._accept)

    def _accept(self) -> None:
        while True:
            try:
                conn, peer = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # e.g. too many open files: stop listening a moment (as asyncio's servers do)
                fd = self.sock.fileno()
                self._loop.remove_reader(fd)
                self._loop.call_later(ACCEPT_PAUSE_S, self._resume, fd)
                return
            SocketReceiver(self.agent, self.local, conn, peer)

    def _resume(self, fd: int) -> None:
        if self.sock.fileno() == fd:
            self._loop.add_reader(fd, self._accept)

    def close(self) -> None:
        if self.sock.fileno() >= 0:
            self._loop.remove_reader(self.sock.fileno())
            self.sock.close()

    async def wait_closed(self) -> None:
        return None
