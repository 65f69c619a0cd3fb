"""An agent's sending side: sockets bound to a NIC port and cut off when their path dies, a transfer's
frame and its ack (over a socket or a stream), the port pair an attempt takes, and the persistent
connection transfers between two NIC ports share. Standard library only."""

from __future__ import annotations

import asyncio
import collections
import errno
import socket
import time
from dataclasses import dataclass

from traffic.runtime.orders import PlannedTransfer
from traffic.runtime.wire import ACK, ACK_MAGIC, frame_header, payload_pieces

DEFAULT_DEAD_AFTER_S = 1.0
# what a dead path looks like to TCP (or our connect bound): worth one more try, elsewhere if possible
DEAD_ERRNOS = frozenset({errno.ETIMEDOUT, errno.ECONNRESET, errno.ECONNABORTED, errno.EPIPE, errno.EHOSTUNREACH,
                         errno.ENETUNREACH, errno.ENETDOWN})
IO_MODES = ("sock", "stream")
FAST_PATH_BYTES = 1 << 17  # frames up to this size may go out in Channel.submit itself
ACK_READ_BYTES = 1 << 16


def bound_socket(src_ip: str, dead_after: float = DEFAULT_DEAD_AFTER_S, port: int = 0):
    """A non-blocking TCP socket bound to ``src_ip`` so routing sends it from that NIC port (and to ``port`` when
    given: None if the kernel refuses that port, EADDRINUSE).

    IP_BIND_ADDRESS_NO_PORT defers the port choice to connect(), so thousands of
    short transfers do not run out of ephemeral ports held in TIME_WAIT.
    TCP_USER_TIMEOUT fails the connection (ETIMEDOUT) once sent data stays
    unacknowledged ``dead_after`` seconds: a cut cable only stalls TCP otherwise.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no Nagle stall on the tail
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, max(1, round(dead_after * 1000)))
        if port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port of an earlier run in TIME_WAIT
        elif hasattr(socket, "IP_BIND_ADDRESS_NO_PORT"):
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_BIND_ADDRESS_NO_PORT, 1)
        try:
            sock.bind((src_ip, port))
        except OSError as exc:
            if port and exc.errno == errno.EADDRINUSE:
                sock.close()
                return None
            raise
    except BaseException:
        sock.close()
        raise
    return sock


async def connect(loop: asyncio.AbstractEventLoop, sock: socket.socket, dst: tuple[str, int],
                   dead_after: float) -> None:
    """Connect within ``dead_after`` s; a SYN nobody answers is a dead path, not a slow one."""
    try:
        async with asyncio.timeout(dead_after):
            await loop.sock_connect(sock, dst)
    except TimeoutError as exc:
        if exc.errno:
            raise  # the kernel's own ETIMEDOUT
        raise TimeoutError(errno.ETIMEDOUT, f"connect not done within {dead_after:g} s (--dead-after)") from None


def check_ack(raw: bytes, t: PlannedTransfer) -> tuple[int, str | None]:
    """(bytes the receiver counted, error or None) from an ack."""
    magic, transfer_id, nbytes, crc_ok = ACK.unpack(raw)
    if magic != ACK_MAGIC or transfer_id != t.id:
        return nbytes, f"bad ack (magic {magic!r}, id {transfer_id}); expected id {t.id}"
    if nbytes != t.bytes:
        return nbytes, f"receiver counted {nbytes} of {t.bytes} bytes"
    if not crc_ok:
        return nbytes, "receiver reported a crc mismatch"
    return nbytes, None


async def exchange_sock(loop: asyncio.AbstractEventLoop, sock: socket.socket,
                         t: PlannedTransfer) -> bytes:
    """Send header + payload with loop.sock_sendall, read the ack with sock_recv."""
    await loop.sock_sendall(sock, frame_header(t.id, t.bytes))
    for piece in payload_pieces(t.id, t.bytes):
        await loop.sock_sendall(sock, piece)
    return await _read_ack(loop, sock)


async def _read_ack(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> bytes:
    """One whole ack; ConnectionError if the stream ends inside it."""
    ack = b""
    while len(ack) < ACK.size:
        chunk = await loop.sock_recv(sock, ACK.size - len(ack))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(ack)} of {ACK.size} ack bytes")
        ack += chunk
    return ack


async def exchange_stream(loop: asyncio.AbstractEventLoop, sock: socket.socket,
                           t: PlannedTransfer) -> bytes:
    """The same over asyncio streams (kept to compare start lateness, see --io)."""
    reader, writer = await asyncio.open_connection(sock=sock)
    try:  # the transport owns the socket now; abort() unregisters it at once
        writer.write(frame_header(t.id, t.bytes))
        for piece in payload_pieces(t.id, t.bytes):
            writer.write(piece)
            await writer.drain()
        try:
            return await reader.readexactly(ACK.size)
        except asyncio.IncompleteReadError as exc:
            raise ConnectionError(f"connection closed after {len(exc.partial)} of {ACK.size} ack bytes") from None
    finally:
        writer.transport.abort()


def release(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    """Close a sender socket. A cancelled sock_sendall/sock_recv unregisters its fd only
    on a later loop turn, so drop the registrations first: a reused fd number must
    never inherit a stale one."""
    if sock.fileno() >= 0:
        loop.remove_reader(sock.fileno())
        loop.remove_writer(sock.fileno())
    sock.close()


def error_text(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def is_dead(exc: BaseException) -> bool:
    """A failure of the path, not of the peer's checks, our own timeout or a stop: worth one retry."""
    return isinstance(exc, OSError) and exc.errno in DEAD_ERRNOS


@dataclass(slots=True)
class Route:
    """The port pair a transfer's current attempt uses and what its attempts met, for its sent record."""

    src_ip: str
    dst_ip: str
    connected: float | None = None
    first_error: str | None = None

    def other(self, t: PlannedTransfer) -> tuple[str, str]:
        """The pair a retry takes: the other of planned/alternative, or the same one when there is no other."""
        if t.alt_src_ip is None or t.alt_dst_ip is None:
            return self.src_ip, self.dst_ip
        if (self.src_ip, self.dst_ip) == (t.src_ip, t.dst_ip):
            return t.alt_src_ip, t.alt_dst_ip
        return t.src_ip, t.dst_ip


class Channel:
    """One persistent TCP connection from a NIC port to a peer's listener, reused by every
    transfer between them, like a queue pair of a KV transfer engine (Mooncake Transfer
    Engine, NIXL): transfers queue on it in order, their frames go back to back without
    waiting for acks, and the acks come back in the same order. A connection that fails
    fails what is queued or in flight on it; the next transfer opens a new one."""

    def __init__(self, src_ip: str, dst: tuple[str, int], dead_after: float = DEFAULT_DEAD_AFTER_S,
                 open_socket=bound_socket) -> None:
        self.src_ip, self.dst, self.dead_after = src_ip, dst, dead_after
        self.open_socket = open_socket  # (src_ip, dead_after) -> a bound socket (in the sender's namespace)
        # (transfer, its ack, [time on the wire], the rest of a frame ``submit`` began or None)
        self.queue: asyncio.Queue[tuple] = asyncio.Queue()
        self._idle = False  # the writer waits for the queue: nothing of ours is being written
        self.inflight: collections.deque[tuple[PlannedTransfer, asyncio.Future[bytes]]] = collections.deque()
        self.sock: socket.socket | None = None
        self._acks = bytearray()  # ack bytes read and not yet whole
        self.closed = False
        self.writer = asyncio.create_task(self._write())

    def submit(self, t: PlannedTransfer) -> tuple[asyncio.Future[bytes], list[float]]:
        """Queue ``t``; its ack arrives on the future, the time its header went out in the list.

        When the connection is up and nothing is queued or being written, the frame goes out in this call (one
        send; what the socket does not take, the writer sends next, before anything queued later): an order
        reaches the wire without waiting for loop turns."""
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        on_wire: list[float] = []
        if self.sock is not None and self._idle and self.queue.empty() and t.bytes <= FAST_PATH_BYTES:
            data = frame_header(t.id, t.bytes) + b"".join(payload_pieces(t.id, t.bytes))
            try:
                n = self.sock.send(data)
            except (BlockingIOError, InterruptedError):
                n = 0
            except OSError:
                n = -1  # the writer meets the error and fails what is queued
            if n >= 0:
                on_wire.append(time.monotonic())
                self.inflight.append((t, fut))
                if n < len(data):
                    self.queue.put_nowait((t, fut, on_wire, memoryview(data)[n:]))
                return fut, on_wire
        self.queue.put_nowait((t, fut, on_wire, None))
        return fut, on_wire

    async def _write(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._idle = True
            t, fut, on_wire, rest = await self.queue.get()
            self._idle = False
            if rest is not None:  # the rest of a frame submit() began: it is in flight already
                try:
                    await loop.sock_sendall(self.sock, rest)
                except OSError as exc:
                    self._fail(exc)
                continue
            if fut.done():
                continue  # timed out or cancelled while queued
            try:
                if self.sock is None:
                    self.sock = self.open_socket(self.src_ip, self.dead_after)
                    await connect(loop, self.sock, self.dst, self.dead_after)
                    self._acks = bytearray()
                    loop.add_reader(self.sock.fileno(), self._on_acks, self.sock)
                on_wire.append(time.monotonic())
                self.inflight.append((t, fut))
                await loop.sock_sendall(self.sock, frame_header(t.id, t.bytes))
                for piece in payload_pieces(t.id, t.bytes):
                    await loop.sock_sendall(self.sock, piece)
            except OSError as exc:
                if not fut.done() and (t, fut) not in self.inflight:
                    fut.set_exception(exc)
                self._fail(exc)

    def _on_acks(self, sock: socket.socket) -> None:
        """The connection is readable: every whole ack in what arrived settles the oldest transfer in flight
        (a reader callback, not a task: no registration and future per ack)."""
        try:
            data = sock.recv(ACK_READ_BYTES)
            if not data:
                raise ConnectionError(f"connection closed after {len(self._acks) % ACK.size} of {ACK.size} ack bytes")
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            if sock is self.sock:
                self._fail(exc)
            return
        acks = self._acks
        acks += data
        whole = len(acks) - len(acks) % ACK.size
        for off in range(0, whole, ACK.size):
            if not self.inflight:
                if sock is self.sock:
                    self._fail(ConnectionError("an ack arrived with no transfer in flight"))
                return
            _, fut = self.inflight.popleft()
            if not fut.done():
                fut.set_result(bytes(acks[off:off + ACK.size]))
        del acks[:whole]

    def _fail(self, exc: BaseException) -> None:
        """Fail everything queued or in flight and drop the connection (the next transfer reconnects):
        what waits behind a dead connection is as stuck as what is on it."""
        err = exc if isinstance(exc, OSError) else ConnectionError(str(exc))
        waiting = [fut for _, fut in self.inflight]
        self.inflight.clear()
        while not self.queue.empty():
            waiting.append(self.queue.get_nowait()[1])
        for fut in waiting:
            if not fut.done():
                fut.set_exception(err)
        if self.sock is not None:  # its reader callback goes with it
            release(asyncio.get_running_loop(), self.sock)
            self.sock = None
        if not self.closed and self.writer is not asyncio.current_task():
            self.writer.cancel()  # it may wait in a send on the released socket, which nothing will wake
            self.writer = asyncio.create_task(self._write())

    def close(self) -> None:
        self.closed = True
        self.writer.cancel()
        self._fail(ConnectionError("agent stopped"))
