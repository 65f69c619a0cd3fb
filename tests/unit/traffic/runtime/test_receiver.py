"""traffic.runtime.receiver on a stand-in transport: each whole frame is recorded and acked (bytes received,
crc ok), a bad frame ends the connection with one recorded error, a frame cut short is recorded as such."""

from __future__ import annotations

import asyncio

from traffic.runtime import wire
from traffic.runtime.receiver import RECV_BUFFER_BYTES, Receiver


class Agent:
    def __init__(self) -> None:
        self.connections: set = set()
        self.recv_buffer = memoryview(bytearray(RECV_BUFFER_BYTES))
        self.recorded: list = []

    def record_recv(self, frame, peer, local) -> None:
        self.recorded.append((frame, peer, local))


class Transport(asyncio.Transport):
    """A stream transport that keeps what is written to it."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[bytes] = []
        self.closed = False

    def get_extra_info(self, name):
        return ("10.1.0.1", 40000) if name == "peername" else None

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def close(self) -> None:
        self.closed = True


def _feed(rx: Receiver, agent: Agent, data: bytes) -> None:
    agent.recv_buffer[:len(data)] = data
    rx.buffer_updated(len(data))


def _connected() -> tuple[Receiver, Agent, Transport]:
    agent, transport = Agent(), Transport()
    rx = Receiver(agent, "10.2.0.9")
    rx.connection_made(transport)
    return rx, agent, transport


def test_a_whole_frame_is_recorded_and_acked_with_its_bytes_and_crc():
    rx, agent, transport = _connected()
    assert agent.connections == {rx}
    payload = b"".join(bytes(p) for p in wire.payload_pieces(42, 1000))
    _feed(rx, agent, wire.frame_header(42, 1000) + payload)
    [(frame, peer, local)] = agent.recorded
    assert (frame.id, frame.received, frame.crc_ok, peer, local) == (42, 1000, True, "10.1.0.1:40000", "10.2.0.9")
    assert transport.written == [wire.ACK.pack(wire.ACK_MAGIC, 42, 1000, True)]


def test_a_wrong_payload_is_acked_as_a_crc_mismatch():
    rx, agent, transport = _connected()
    _feed(rx, agent, wire.frame_header(7, 4, crc=0) + b"abcd")
    assert agent.recorded[0][0].crc_ok is False
    assert transport.written == [wire.ACK.pack(wire.ACK_MAGIC, 7, 4, False)]


def test_a_bad_frame_is_recorded_once_and_ends_the_connection():
    rx, agent, transport = _connected()
    _feed(rx, agent, b"XXXX" + bytes(wire.HEADER.size - 4))
    [(frame, _, _)] = agent.recorded
    assert frame.id is None and frame.crc_ok is False and transport.closed and transport.written == []


def test_a_frame_cut_short_is_recorded_when_the_connection_ends():
    rx, agent, transport = _connected()
    _feed(rx, agent, wire.frame_header(9, 1000) + b"x" * 10)
    assert agent.recorded == []
    rx.connection_lost(None)
    [(frame, _, _)] = agent.recorded
    assert (frame.id, frame.received) == (9, 10) and "connection closed" in frame.error
    assert agent.connections == set()


def test_a_socket_receiver_stamps_a_frame_with_the_kernels_receive_time_and_acks_it():
    """Data that waited in the socket before the loop read it keeps the time it arrived."""
    import socket
    import time

    from traffic.runtime.receiver import Listener

    async def main():
        agent = Agent()
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(4)
        listener = Listener(agent, "127.0.0.1", srv)
        c = socket.create_connection(srv.getsockname())
        await asyncio.sleep(0.05)  # accepted
        payload = b"".join(bytes(p) for p in wire.payload_pieces(5, 3000))
        sent_at = time.monotonic()
        c.sendall(wire.frame_header(5, 3000) + payload)
        time.sleep(0.2)  # the loop is busy: the receiver reads 200 ms after the data came
        read_from = time.monotonic()
        for _ in range(50):
            await asyncio.sleep(0.01)
            if agent.recorded:
                break
        [(frame, peer, local)] = agent.recorded
        c.settimeout(2)
        ack = c.recv(wire.ACK.size)
        c.close()
        await asyncio.sleep(0.05)
        listener.close()
        return frame, ack, sent_at, read_from, agent

    frame, ack, sent_at, read_from, agent = asyncio.run(main())
    assert frame.verified and frame.id == 5
    assert sent_at - 0.001 <= frame.last_byte < read_from - 0.15  # the kernel's time, not the read's
    assert ack == wire.ACK.pack(wire.ACK_MAGIC, 5, 3000, True)
    assert agent.connections == set()  # the peer closed: the receiver went
