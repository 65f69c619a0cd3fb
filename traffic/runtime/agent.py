"""Traffic agent: one small process per emulated GPU host that replays its KV transfers.

Run inside a GPU's namespace::

    ip netns exec tb-gpu3 python -m traffic.runtime.agent --name gpu3 \\
        --listen 10.1.0.3:7000 --listen 10.2.0.3:7000 \\
        --plan gpu3.plan.jsonl --out out_dir (--t0 <CLOCK_MONOTONIC s> | --t0-stdin) [--ready-file path]

With ``--t0-stdin`` the agent binds, announces readiness, then reads t0 as
one line on standard input: the orchestrator hands out the common start
time only once every agent is listening, so a slow start costs wall time,
never lateness (``traffic.runtime.launcher`` forks agents this way).

Receiver: every ``--listen`` address accepts TCP connections carrying one or
more frames ``HEADER`` (magic, transfer id u64, payload length u64, crc32 u32)
+ payload. Per frame it writes a line to ``<name>.recv.jsonl`` (id, peer,
bytes, first/last byte times, crc check, verified) and answers with ``ACK``
(magic, id, bytes received, crc ok).

Sender: each plan line is one transfer, handed over at ``t0 + start`` (one
task per transfer, so a slow one never holds up others). By default
(``--connections persistent``) every transfer of one NIC port pair (``src_ip``
-> ``dst_ip``, the destination's port) goes on that pair's one persistent TCP
connection, bound to ``src_ip``, queued behind the pair's earlier transfers,
frames back to back and acks in order, like a KV transfer engine's queue pair
(``traffic.runtime.sender.Channel``); ``--connections per-transfer`` gives each
transfer a TCP connection of its own. The sender waits for the ack and writes a
line to ``<name>.sent.jsonl``. Failures (refused, reset, timeout, stop) are written
with ``ok: false`` and the error, never dropped. Once every planned transfer
has ended, ``<name>.done`` appears; the agent keeps receiving until SIGTERM or
SIGINT, then records what was in flight, flushes and exits 0.

Dead connections: a cut cable makes TCP stall in retransmission, not fail. An
RDMA NIC fails its queue pair once the retry count is exceeded, and a transfer
engine then resubmits on another NIC (Mooncake Transfer Engine, "Fault
Handling"). The sender does the same: every socket gets ``TCP_USER_TIMEOUT`` =
``--dead-after`` (data unacknowledged that long fails the connection with
ETIMEDOUT; so does a window that stays shut that long) and a connect is given
as long. A transfer that fails on a dead connection (that timeout, reset,
aborted, broken pipe, host/network unreachable or down) is sent once more,
whole, on a fresh connection: over the other NIC port pair
(``alt_src_ip`` -> ``alt_dst_ip`` of its plan line) when it has one, else over
the same pair; on a persistent connection every transfer queued or in flight
on it is. A bad ack or crc, ``--transfer-timeout`` (the whole budget,
both attempts) and a stop are not retried. For ``--dead-hold`` seconds after
a dead connection on a pair, new transfers planned on it go straight to its
alternative; then the planned pair is tried again. The sent record says what
happened: ``retried``, ``first_error``, ``moved`` (sent on the other pair) and
``sent_src_ip``/``sent_dst_ip`` (where the last attempt went); a retry that
fails too is ``ok: false`` with "retry failed: <second> (first: <first>)".
The receiver records every frame it saw, a cut one included, but reports only
whole frames to a coordinator: a cut frame's sender retries it or reports it.

All times are ``time.monotonic()`` (CLOCK_MONOTONIC, shared by every network
namespace on the host), absolute, in seconds. Standard library only, so 32-64
of these start fast and stay small. Bad arguments: one line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import functools
import json
import math
import os
import signal
import socket
import sys
import time
from typing import Any, Awaitable, Callable, TextIO

from traffic.runtime.orders import AgentError, PlannedTransfer, order_transfer, parse_listen, read_plan
from traffic.runtime.ports import source_port
from traffic.runtime.receiver import RECV_BUFFER_BYTES, Listener, Receiver
from traffic.runtime.sender import (
    DEFAULT_DEAD_AFTER_S,
    IO_MODES,
    Channel,
    Route,
    bound_socket,
    check_ack,
    connect,
    error_text,
    exchange_sock,
    exchange_stream,
    is_dead,
    release,
)
from traffic.runtime.wire import Received

DEFAULT_TRANSFER_TIMEOUT_S = 60.0
DEFAULT_DEAD_HOLD_S = 2.0
CONNECTION_MODES = ("persistent", "per-transfer")
SWEEP_S = 1.0  # hosted: how often transfers waiting for their ack are checked against the timeout


# --------------------------------------------------------------------------- payload and frames


# --------------------------------------------------------------------------- records

class RecordFile:
    """JSON-lines output, line-buffered so a crash leaves every finished record on disk; ``deferred`` (hosted
    agents, where one loop also stamps every arrival): the records kept as they are and encoded and written
    when the file closes, off the run's hot path (a crash of that one process loses the run anyway)."""

    def __init__(self, path: str, buffering: int = 1, deferred: bool = False) -> None:
        try:
            self._file: TextIO = open(path, "w", encoding="utf-8", buffering=buffering)
        except OSError as exc:
            raise AgentError(f"cannot write {path}: {exc.strerror}") from None
        self._kept: list[dict[str, Any]] | None = [] if deferred else None

    def write(self, record: dict[str, Any]) -> None:
        if self._kept is not None:
            self._kept.append(record)
            return
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")

    def close(self) -> None:
        if self._kept:
            self._file.write("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in self._kept))
            self._kept.clear()
        self._file.close()


def _touch(path: str, text: str = "") -> None:
    """Write ``path`` atomically so a watcher never reads half of it."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


# --------------------------------------------------------------------------- plan


# --------------------------------------------------------------------------- receiver


# --------------------------------------------------------------------------- sender


Exchange = Callable[[asyncio.AbstractEventLoop, socket.socket, PlannedTransfer], Awaitable[bytes]]
EXCHANGES: dict[str, Exchange] = {"sock": exchange_sock, "stream": exchange_stream}


# --------------------------------------------------------------------------- agent

class Agent:
    """Receivers on every listen address plus the timed sender of one plan."""

    def __init__(self, name: str, listen: list[tuple[str, int]], plan: list[PlannedTransfer],
                 out_dir: str, t0: float | None, ready_file: str | None = None,
                 transfer_timeout: float = DEFAULT_TRANSFER_TIMEOUT_S, io: str = "sock",
                 connections: str = "persistent", control: str | None = None,
                 dead_after: float = DEFAULT_DEAD_AFTER_S, dead_hold: float = DEFAULT_DEAD_HOLD_S,
                 clock_offset: float = 0.0, netns: str | None = None,
                 on_report: Callable[[dict[str, Any]], None] | None = None, record_buffering: int = 1,
                 port_seed: int | None = None) -> None:
        self.name = name
        # hosted in a process that serves many GPUs (traffic.runtime.host): the GPU's namespace, entered only to
        # create its sockets (a socket stays in the namespace it was made in), and where reports go: a call
        self.netns = netns
        self.on_report = on_report
        # persistent connections' source ports drawn from this seed (traffic.runtime.ports; None: the kernel's)
        self.port_seed = port_seed
        self._ports_used: set[tuple[str, int]] = set()
        self.opened: list[tuple[str, int, str, int]] = []  # (src ip, src port, dst ip, dst port) of each one
        self.dead_after = dead_after
        self.dead_hold = dead_hold
        self._dead_until: dict[tuple[str, str], float] = {}  # (src_ip, dst_ip) -> monotonic end of its hold
        self.control = control
        self.clock_offset = clock_offset  # this host's clock minus the coordinator's (control mode)
        self._control_out: asyncio.StreamWriter | None = None
        self._reports: list[str] = []
        self.listen = listen
        self.plan = plan
        self.out_dir = out_dir
        self.t0 = t0
        self.ready_file = ready_file
        self.transfer_timeout = transfer_timeout
        self.exchange = EXCHANGES[io]
        self.persistent = connections == "persistent"
        self._channels: dict[tuple[str, str, int], Channel] = {}
        self.recv_buffer = memoryview(bytearray(RECV_BUFFER_BYTES))
        self.connections: set[Receiver] = set()
        self._servers: list[Listener] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._waiting: dict[int, tuple[float, asyncio.Future]] = {}  # hosted: id -> (start, ack future)
        self._timed_out: set[int] = set()
        self._sweep: asyncio.TimerHandle | None = None
        self._pending = len(plan)
        self._started = 0
        self._stopping = False
        deferred = on_report is not None
        self._sent = RecordFile(os.path.join(out_dir, f"{name}.sent.jsonl"), record_buffering, deferred)
        self._recv = RecordFile(os.path.join(out_dir, f"{name}.recv.jsonl"), record_buffering, deferred)

    # -- records
    def record_recv(self, r: Received, peer: str, local: str) -> None:
        self._recv.write({"id": r.id, "peer": peer, "local": local, "bytes": r.received,
                          "expected_bytes": r.length, "crc_ok": r.crc_ok, "first_byte": r.first_byte,
                          "last_byte": r.last_byte, "verified": r.verified, "error": r.error})
        if r.id is not None and r.error is None:  # a cut frame is its sender's to retry or report
            self._report({"id": r.id, "t": r.last_byte - self.clock_offset, "ok": r.verified, "error": r.error})

    def _report(self, obj: dict[str, Any]) -> None:
        """Tell the coordinator (control mode only) what arrived or failed; lines of one loop turn
        go in one write. Hosted: the coordinator's own call, at once."""
        if self.on_report is not None:
            self.on_report(obj)
            return
        if self._control_out is None:
            return
        if not self._reports:
            asyncio.get_running_loop().call_soon(self._flush_reports)
        self._reports.append(json.dumps(obj, separators=(",", ":")) + "\n")

    def _flush_reports(self) -> None:
        if self._control_out is not None and not self._control_out.is_closing():
            self._control_out.write("".join(self._reports).encode())
        self._reports.clear()

    def _record_sent(self, t: PlannedTransfer, route: Route | None, start: float | None,
                     end: float | None, acked: int | None, error: str | None) -> None:
        route = route or Route(t.src_ip, t.dst_ip)
        retried = route.first_error is not None
        if retried and error is not None:
            error = f"retry failed: {error} (first: {route.first_error})"
        self._sent.write({"id": t.id, "request_id": t.request_id, "src": t.src, "dst": t.dst,
                          "src_ip": t.src_ip, "dst_ip": t.dst_ip, "dst_port": t.dst_port,
                          "bytes": t.bytes, "scheduled_start": None if self.t0 is None else self.t0 + t.start,
                          "start": start,
                          "connected": route.connected, "end": end, "acked_bytes": acked,
                          "ok": error is None, "error": error,
                          "retried": retried, "first_error": route.first_error,
                          "sent_src_ip": route.src_ip, "sent_dst_ip": route.dst_ip,
                          "moved": (route.src_ip, route.dst_ip) != (t.src_ip, t.dst_ip)})
        if error is not None:
            self._report({"id": t.id, "failed": error} | ({"retried": True} if retried else {}))
        self._pending -= 1
        if self._pending == 0 and not self._stopping and self.control is None:
            _touch(os.path.join(self.out_dir, f"{self.name}.done"))

    # -- sockets in this GPU's namespace
    def _in_netns(self):
        from traffic.runtime import netns

        return netns.inside(self.netns) if self.netns else contextlib.nullcontext()

    def open_socket(self, src_ip: str, dead_after: float, dst: tuple[str, int] | None = None) -> socket.socket:
        """A sender socket bound to ``src_ip``, made in this GPU's namespace; towards ``dst`` with a port seed,
        bound to the drawn source port (the next one while the kernel refuses it)."""
        if self.port_seed is None or dst is None:
            with self._in_netns():
                return bound_socket(src_ip, dead_after)
        for _ in range(64):
            port = source_port(self.port_seed, src_ip, dst[0], self._ports_used)
            with self._in_netns():
                sock = bound_socket(src_ip, dead_after, port)
            if sock is not None:
                self.opened.append((src_ip, port, dst[0], dst[1]))
                return sock
        raise OSError(errno.EADDRINUSE, f"no free source port on {src_ip} after 64 draws")

    def _listener(self, host: str, port: int) -> socket.socket:
        with self._in_netns():
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(1024)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        return sock

    # -- lifecycle
    async def bind(self) -> list[str]:
        """Start every listener; the bound ``ip:port`` list (port 0 resolved)."""
        bound = []
        for host, port in self.listen:
            local = f"{host}:{port}"
            try:
                server = Listener(self, local, self._listener(host, port))
            except OSError as exc:
                raise AgentError(f"cannot listen on {local}: {exc.strerror or exc}") from None
            self._servers.append(server)
            bound.extend(f"{s.getsockname()[0]}:{s.getsockname()[1]}" for s in server.sockets)
        return bound

    async def run(self, stop: asyncio.Event) -> None:
        """Bind, announce readiness, replay the plan, serve until ``stop`` is set."""
        bound = await self.bind()
        if self.ready_file:
            _touch(self.ready_file, json.dumps({"name": self.name, "listen": bound}) + "\n")
        if self.control is not None:
            orders = asyncio.create_task(self._take_orders(stop))
            await stop.wait()
            await self.shutdown(orders)
            return
        if self.t0 is None:
            self.t0 = await _t0_from_stdin(stop)
        if not self.plan and self.t0 is not None:
            _touch(os.path.join(self.out_dir, f"{self.name}.done"))
        dispatcher = asyncio.create_task(self._dispatch() if self.t0 is not None else stop.wait())
        await stop.wait()
        await self.shutdown(dispatcher)

    async def _take_orders(self, stop: asyncio.Event) -> None:
        """Control mode: connect to the coordinator, then send each message it orders at once.

        ``due`` (when the coordinator ordered it) stands for the scheduled start, so lateness is
        the order's trip through the socket and this loop."""
        try:
            reader, self._control_out = await asyncio.open_unix_connection(self.control)
        except OSError as exc:
            print(f"traffic.runtime.agent: error: cannot reach the coordinator at {self.control}: {exc}",
                  file=sys.stderr)
            stop.set()
            return
        self._control_out.write((json.dumps({"hello": self.name}) + "\n").encode())
        self.t0 = 0.0
        while line := await reader.readline():
            order = json.loads(line)
            if order.get("op") == "stop":  # everything arrived; let the senders read their acks
                if self._tasks:
                    await asyncio.wait(set(self._tasks), timeout=self.transfer_timeout)
                break
            try:
                t = order_transfer(order, self.name, self.clock_offset)
            except AgentError as exc:
                print(f"traffic.runtime.agent: error: {exc}", file=sys.stderr)
                break
            self.order(t)
        stop.set()

    def order(self, t: PlannedTransfer) -> None:
        """Send ``t`` now: on a persistent connection its frame goes out in this call when the connection is
        idle (``Channel.submit``); a task waits for its ack and records it."""
        self.follow(self.put_on_wire(t))

    def put_on_wire(self, t: PlannedTransfer) -> tuple:
        """``order``'s first half: the frame on its way (persistent connections); what ``follow`` takes. A
        step's orders all go out before any of their tasks is made (``traffic.runtime.host``)."""
        start = time.monotonic()
        self.plan.append(t)
        self._started += 1
        route = self._route(t)
        return t, start, route, self._submit(t, route) if self.persistent else None

    def follow(self, sent: tuple) -> None:
        """``order``'s second half: the task that waits for the ack, retries and records. Hosted, on a
        persistent connection: a callback on the ack instead (a task per message costs its loop turns in the
        one loop that also stamps every arrival); the timeout is a sweep once a second, a retry a task."""
        t, start, route, first = sent
        if first is None or self.on_report is None:
            task = asyncio.create_task(self._transfer(*sent))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return
        fut, on_wire = first
        self._waiting[t.id] = (start, fut)
        fut.add_done_callback(functools.partial(self._first_done, t, start, route, on_wire))
        if self._sweep is None:
            self._sweep = asyncio.get_running_loop().call_later(SWEEP_S, self._sweep_timeouts)

    def _first_done(self, t: PlannedTransfer, start: float, route: Route, on_wire: list, fut) -> None:
        self._waiting.pop(t.id, None)
        route.connected = on_wire[0] if on_wire else None
        if fut.cancelled():
            timed_out = t.id in self._timed_out
            self._timed_out.discard(t.id)
            error = f"timeout after {self.transfer_timeout:g} s" if timed_out else \
                "cancelled: agent stopped before the transfer ended"
            self._record_sent(t, route, start, None, None, error)
            return
        exc = fut.exception()
        if exc is None:
            end = time.monotonic()
            acked, error = check_ack(fut.result(), t)
            self._record_sent(t, route, start, end, acked, error)
        elif isinstance(exc, OSError) and is_dead(exc) and not self._stopping:
            task = asyncio.create_task(self._retry(t, start, route, exc))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        else:
            self._record_sent(t, route, start, None, None, self._failure(exc))

    async def _retry(self, t: PlannedTransfer, start: float, route: Route, exc: OSError) -> None:
        """The second attempt after a dead connection (``_with_retry``'s), within what is left of the timeout."""
        self._move(t, route, exc)
        end = acked = error = None
        try:
            async with asyncio.timeout(max(0.0, start + self.transfer_timeout - time.monotonic())):
                ack = await self._on_channel(t, route)
            end = time.monotonic()
            acked, error = check_ack(ack, t)
        except (TimeoutError, asyncio.CancelledError, OSError) as e:
            error = self._failure(e)
        self._record_sent(t, route, start, end, acked, error)

    def _sweep_timeouts(self) -> None:
        now = time.monotonic()
        for tid, (start, fut) in list(self._waiting.items()):
            if now - start >= self.transfer_timeout and not fut.done():
                self._timed_out.add(tid)
                fut.cancel()
        self._sweep = None if self._stopping else asyncio.get_running_loop().call_later(SWEEP_S, self._sweep_timeouts)

    async def settle(self, timeout_s: float) -> None:
        """Until every transfer ordered so far has its ack (or ``timeout_s``)."""
        deadline = time.monotonic() + timeout_s
        while (self._tasks or self._waiting) and time.monotonic() < deadline:
            if self._tasks:
                await asyncio.wait(set(self._tasks), timeout=min(0.05, max(0.0, deadline - time.monotonic())))
            else:
                await asyncio.sleep(0.01)

    async def _dispatch(self) -> None:
        """Sleep on the loop's timer to each start time and launch that transfer's task.

        One timer at a time (not one per transfer) keeps the heap small with
        plans of many thousands of slices; no busy-wait, so lateness is about the
        epoll timeout granularity (1 ms) plus loop load.
        """
        loop = asyncio.get_running_loop()
        for t in self.plan:
            delay = self.t0 + t.start - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            self._started += 1
            task = asyncio.create_task(self._transfer(t))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _transfer(self, t: PlannedTransfer, start: float | None = None, route: Route | None = None,
                        first: tuple | None = None) -> None:
        """Send ``t`` (on its pair's persistent connection or its own), retrying once after a dead
        connection, and wait for its ack; always leaves exactly one sent record. ``start`` is when it was
        due and handed over, ``connected`` when the last attempt connected (its own connection) or put
        its first byte on the wire (persistent: so its FCT includes waiting behind earlier transfers)."""
        start = time.monotonic() if start is None else start
        route = self._route(t) if route is None else route
        end = acked = error = None
        try:
            async with asyncio.timeout(self.transfer_timeout):
                ack = await self._with_retry(t, route, first)
            end = time.monotonic()
            acked, error = check_ack(ack, t)
        except (TimeoutError, asyncio.CancelledError, OSError) as exc:
            error = self._failure(exc)
        self._record_sent(t, route, start, end, acked, error)

    def _route(self, t: PlannedTransfer) -> Route:
        """The planned pair, or its alternative while the planned one is held dead (and the other is not)."""
        if t.alt_src_ip is not None and t.alt_dst_ip is not None and self._held(t.src_ip, t.dst_ip) \
                and not self._held(t.alt_src_ip, t.alt_dst_ip):
            return Route(t.alt_src_ip, t.alt_dst_ip)
        return Route(t.src_ip, t.dst_ip)

    def _held(self, src_ip: str, dst_ip: str) -> bool:
        """A dead connection on this pair ended less than ``dead_hold`` ago."""
        return time.monotonic() < self._dead_until.get((src_ip, dst_ip), -math.inf)

    async def _with_retry(self, t: PlannedTransfer, route: Route, first: tuple | None = None) -> bytes:
        """One attempt; after a dead connection, hold its pair dead and make one more, whole, on a fresh
        connection over the other pair (an RDMA NIC's retry-exceeded, then the engine resubmits elsewhere).
        ``first``: the first attempt, already submitted (``order``)."""
        attempt = self._on_channel if self.persistent else self._on_own_connection
        try:
            if first is not None:
                return await self._acked(first, route)
            return await attempt(t, route)
        except OSError as exc:
            if self._stopping or not is_dead(exc):
                raise
            self._move(t, route, exc)
        return await attempt(t, route)

    def _move(self, t: PlannedTransfer, route: Route, exc: OSError) -> None:
        """Hold ``route``'s pair dead and point it at the other pair for the retry."""
        self._dead_until[(route.src_ip, route.dst_ip)] = time.monotonic() + self.dead_hold
        route.first_error = error_text(exc)
        route.src_ip, route.dst_ip = route.other(t)
        route.connected = None

    def _submit(self, t: PlannedTransfer, route: Route) -> tuple:
        """Queue ``t`` on the persistent connection of ``route``'s pair: (ack future, [time on the wire])."""
        key = (route.src_ip, route.dst_ip, t.dst_port)
        channel = self._channels.get(key)
        if channel is None:
            dst = (route.dst_ip, t.dst_port)
            channel = self._channels[key] = Channel(route.src_ip, dst, self.dead_after,
                                                    functools.partial(self.open_socket, dst=dst))
        return channel.submit(t)

    async def _on_channel(self, t: PlannedTransfer, route: Route) -> bytes:
        """Queue ``t`` on the persistent connection of ``route``'s pair; its ack."""
        return await self._acked(self._submit(t, route), route)

    @staticmethod
    async def _acked(submitted: tuple, route: Route) -> bytes:
        fut, on_wire = submitted
        try:
            return await asyncio.shield(fut)
        finally:
            if not fut.done():
                fut.cancel()
            route.connected = on_wire[0] if on_wire else None

    async def _on_own_connection(self, t: PlannedTransfer, route: Route) -> bytes:
        """Connect from ``route``'s source to its destination, send, read the ack; close."""
        loop = asyncio.get_running_loop()
        sock = self.open_socket(route.src_ip, self.dead_after)
        try:
            await connect(loop, sock, (route.dst_ip, t.dst_port), self.dead_after)
            route.connected = time.monotonic()
            return await self.exchange(loop, sock, t)
        finally:
            release(loop, sock)

    def _failure(self, exc: BaseException) -> str:
        """A failed transfer's error text: our timeout (no errno) or the kernel's, a stop, or the OS's."""
        if isinstance(exc, asyncio.CancelledError):
            return "cancelled: agent stopped before the transfer ended"
        if isinstance(exc, TimeoutError) and not exc.errno:
            return f"timeout after {self.transfer_timeout:g} s"
        return error_text(exc)

    async def shutdown(self, dispatcher: asyncio.Task[None]) -> None:
        """Stop listening, record unfinished work as failed, flush."""
        self._stopping = True
        dispatcher.cancel()
        for server in self._servers:
            server.close()
        if self._sweep is not None:
            self._sweep.cancel()
        for _, fut in list(self._waiting.values()):
            fut.cancel()
        if self._waiting:
            await asyncio.sleep(0)  # their callbacks record them
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        for t in self.plan[self._started:]:
            self._record_sent(t, None, None, None, None, "not started: agent stopped first")
        for channel in self._channels.values():
            channel.close()
        for conn in list(self.connections):
            conn.stop("agent stopped")
        for server in self._servers:
            await server.wait_closed()
        self._sent.close()
        self._recv.close()


async def _t0_from_stdin(stop: asyncio.Event) -> float | None:
    """The start time, one line on stdin; None when told to stop first. A closed
    stdin means the orchestrator is gone: nothing will ever start."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    line_task = asyncio.ensure_future(reader.readline())
    stop_task = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({line_task, stop_task}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop_task.cancel()
        transport.close()
    if not line_task.done():
        line_task.cancel()
        return None
    line = line_task.result().decode().strip()
    try:
        t0 = float(line)
    except ValueError:
        t0 = math.nan
    if not math.isfinite(t0):
        stop.set()
        if line:
            print(f"traffic.runtime.agent: error: t0 {line!r} on stdin is not a finite number", file=sys.stderr)
        return None
    return t0


# --------------------------------------------------------------------------- command line

class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad argument on one line (no usage block), status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number > 0")
    return value


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number >= 0")
    return value


def _finite(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def make_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="traffic.runtime.agent", description="Replay one GPU host's KV transfers and receive others'.")
    p.add_argument("--name", required=True, help="agent name, e.g. gpu3 (names the output files)")
    p.add_argument("--listen", required=True, action="append", type=parse_listen, metavar="IP:PORT",
                   help="receive on this address (repeat for each NIC port)")
    p.add_argument("--plan", help="JSON-lines file of this agent's outgoing transfers")
    p.add_argument("--control", metavar="SOCKET",
                   help="take orders from the coordinator on this Unix socket instead of a plan")
    p.add_argument("--clock-offset", type=_finite, default=0.0, metavar="SECONDS",
                   help="control mode on another host: this host's CLOCK_MONOTONIC minus the coordinator's "
                        "(orders' due times are moved onto this clock, reported times back off it; default 0)")
    p.add_argument("--out", required=True, help="directory for <name>.sent/.recv.jsonl and <name>.done")
    start = p.add_mutually_exclusive_group()
    start.add_argument("--t0", type=_finite, help="CLOCK_MONOTONIC seconds that plan starts count from")
    start.add_argument("--t0-stdin", action="store_true",
                       help="read t0 as one line on stdin once every listener is bound")
    p.add_argument("--ready-file", help="written once every listener is bound")
    p.add_argument("--transfer-timeout", type=_positive, default=DEFAULT_TRANSFER_TIMEOUT_S,
                   help="seconds before a transfer is recorded as failed (default 60)")
    p.add_argument("--dead-after", type=_positive, default=DEFAULT_DEAD_AFTER_S, metavar="SECONDS",
                   help="a connection whose sent data stays unacknowledged this long, or whose connect takes "
                        "this long, is dead (TCP_USER_TIMEOUT; default 1)")
    p.add_argument("--dead-hold", type=_non_negative, default=DEFAULT_DEAD_HOLD_S, metavar="SECONDS",
                   help="after a dead connection on a port pair, send new transfers planned on it over the other "
                        "pair for this long, then try it again (default 2)")
    p.add_argument("--connections", choices=CONNECTION_MODES, default=CONNECTION_MODES[0],
                   help="one persistent connection per (source port, destination port), reused by every "
                        "transfer (default), or a new connection per transfer")
    p.add_argument("--io", choices=IO_MODES, default="sock",
                   help="sender data path: loop.sock_sendall (default) or asyncio streams")
    return p


async def _main(args: argparse.Namespace, plan: list[PlannedTransfer]) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    agent = Agent(args.name, args.listen, plan, args.out, args.t0, args.ready_file,
                  args.transfer_timeout, args.io, args.connections, args.control, args.dead_after,
                  args.dead_hold, args.clock_offset)
    await agent.run(stop)


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    try:
        if not args.name or os.sep in args.name:
            raise AgentError(f"--name {args.name!r} is not allowed; expected a plain name like gpu3")
        if (args.plan is None) == (args.control is None):
            raise AgentError("give exactly one of --plan FILE or --control SOCKET")
        if args.clock_offset and args.control is None:
            raise AgentError(f"--clock-offset {args.clock_offset:g} needs --control: a plan's t0 is already on this "
                             "host's clock")
        if args.control is None and args.t0 is None and not args.t0_stdin:
            raise AgentError("--plan needs --t0 or --t0-stdin")
        plan = read_plan(args.plan, args.name) if args.plan else []
        try:
            os.makedirs(args.out, exist_ok=True)
        except OSError as exc:
            raise AgentError(f"cannot create --out {args.out}: {exc.strerror}") from None
        asyncio.run(_main(args, plan))
    except AgentError as exc:
        print(f"traffic.runtime.agent: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
