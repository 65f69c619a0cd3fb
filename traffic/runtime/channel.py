"""The authenticated control channel between hosts, and the clock-offset estimate it carries.

On one host the agents reach the coordinator through a Unix socket. Across hosts they reach it over
TCP on the underlay, and nothing unauthenticated may talk to the coordinator there: every connection
starts with a challenge-response hello keyed by a per-run secret (32 random bytes, copied to each host
in a 0600 file, never on a command line):

    server -> client   b"TBCH1 <nonce hex>\\n"
    client -> server   b"<name> <purpose> <HMAC-SHA256(secret, nonce|name|purpose) hex>\\n"
    server -> client   b"OK\\n"  (or the connection is closed, and the refusal logged with the peer's address)

``purpose`` is ``relay`` (the connection then carries an agent's control stream unchanged: a relay on
the agent's host listens on the Unix socket path the agent is given and forwards each connection; the
coordinator's side connects it to its own Unix socket) or ``clock`` (the server sends ``T\\n`` and the
client answers its CLOCK_MONOTONIC in ns, ``ROUNDS`` times).

Clock offsets (``estimate_offset``): of N round trips (t_send, t_remote, t_recv), the one with the
smallest round trip bounds the remote clock best: offset = t_remote - (t_send + t_recv) / 2, with
uncertainty RTT / 2 (the remote reading lies somewhere within the round trip).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass

MAGIC = b"TBCH1"
NONCE_BYTES = 16
SECRET_BYTES = 32
HELLO_TIMEOUT_S = 5.0
MAX_LINE = 512
PURPOSES = ("relay", "clock")
ROUNDS = 50


class ChannelRefused(Exception):
    """A hello that failed (the reason, one line)."""


def new_secret() -> bytes:
    return secrets.token_bytes(SECRET_BYTES)


def mac(secret: bytes, nonce: bytes, name: str, purpose: str) -> str:
    return hmac.new(secret, nonce + b"|" + name.encode() + b"|" + purpose.encode(), hashlib.sha256).hexdigest()


def challenge(nonce: bytes) -> bytes:
    return MAGIC + b" " + nonce.hex().encode() + b"\n"


def parse_challenge(line: bytes) -> bytes:
    parts = line.strip().split()
    if len(parts) != 2 or parts[0] != MAGIC:
        raise ChannelRefused("not a testbed control channel (no TBCH1 challenge)")
    try:
        nonce = bytes.fromhex(parts[1].decode())
    except ValueError:
        raise ChannelRefused("malformed challenge") from None
    if len(nonce) != NONCE_BYTES:
        raise ChannelRefused("malformed challenge")
    return nonce


def answer(secret: bytes, nonce: bytes, name: str, purpose: str) -> bytes:
    return f"{name} {purpose} {mac(secret, nonce, name, purpose)}\n".encode()


def verify(secret: bytes, nonce: bytes, line: bytes) -> tuple[str, str]:
    """(name, purpose) of a client's answer, or ChannelRefused saying why."""
    try:
        parts = line.decode("ascii").split()
    except UnicodeDecodeError:
        raise ChannelRefused("no authentication (binary data instead of the hello)") from None
    if len(parts) != 3:
        raise ChannelRefused("no authentication (the hello is missing)")
    name, purpose, given = parts
    if purpose not in PURPOSES:
        raise ChannelRefused(f"unknown purpose {purpose[:20]!r}")
    if not hmac.compare_digest(given, mac(secret, nonce, name, purpose)):
        raise ChannelRefused(f"bad HMAC from {name[:32]!r} (wrong or no run secret)")
    return name, purpose


def _readline(sock: socket.socket) -> bytes:
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = sock.recv(1)
        if not chunk:
            break
        buf += chunk
        if len(buf) > MAX_LINE:
            break
    return buf


def server_hello(sock: socket.socket, secret: bytes) -> tuple[str, str]:
    """The server's side of the hello on an accepted connection: (name, purpose) or ChannelRefused."""
    sock.settimeout(HELLO_TIMEOUT_S)
    nonce = os.urandom(NONCE_BYTES)
    try:
        sock.sendall(challenge(nonce))
        line = _readline(sock)
    except OSError as exc:
        raise ChannelRefused(f"no authentication ({exc.strerror or type(exc).__name__})") from None
    who = verify(secret, nonce, line)
    sock.sendall(b"OK\n")
    sock.settimeout(None)
    return who


def client_hello(sock: socket.socket, secret: bytes, name: str, purpose: str) -> None:
    sock.settimeout(HELLO_TIMEOUT_S)
    nonce = parse_challenge(_readline(sock))
    sock.sendall(answer(secret, nonce, name, purpose))
    if _readline(sock).strip() != b"OK":
        raise ChannelRefused("the coordinator refused the hello")
    sock.settimeout(None)


def connect(addr: tuple[str, int], secret: bytes, name: str, purpose: str) -> socket.socket:
    sock = socket.create_connection(addr, timeout=HELLO_TIMEOUT_S)
    try:
        client_hello(sock, secret, name, purpose)
    except BaseException:
        sock.close()
        raise
    return sock


# ------------------------------------------------------------------ clocks
@dataclass(frozen=True)
class Offset:
    offset_ms: float  # remote clock minus local clock
    uncertainty_ms: float
    rtt_ms: float
    samples: int

    def as_dict(self) -> dict:
        return {"offset_ms": round(self.offset_ms, 4), "uncertainty_ms": round(self.uncertainty_ms, 4),
                "rtt_ms": round(self.rtt_ms, 4), "samples": self.samples}


def estimate_offset(samples: list[tuple[int, int, int]]) -> Offset:
    """The minimum-RTT estimate from (t_send, t_remote, t_recv) ns triples."""
    good = [s for s in samples if s[2] >= s[0]]
    if not good:
        raise ValueError("no usable round trip")
    t_send, t_remote, t_recv = min(good, key=lambda s: s[2] - s[0])
    rtt = t_recv - t_send
    return Offset((t_remote - (t_send + t_recv) / 2) / 1e6, rtt / 2e6, rtt / 1e6, len(good))


def relative_to_first(offsets: dict[str, Offset], first: str) -> dict[str, dict]:
    """Each host's offset from the first host's clock (both measured from the coordinator's): the
    uncertainties add."""
    base = offsets[first]
    out = {}
    for name, o in offsets.items():
        if name == first:
            out[name] = {"offset_ms": 0.0, "uncertainty_ms": 0.0, "rtt_ms": round(o.rtt_ms, 4),
                         "samples": o.samples}
        else:
            out[name] = Offset(o.offset_ms - base.offset_ms, o.uncertainty_ms + base.uncertainty_ms, o.rtt_ms,
                               o.samples).as_dict()
    return out


def measure_clock(sock: socket.socket, rounds: int = ROUNDS) -> Offset:
    """Server side of ``clock``: ``rounds`` pings, the remote's answers, the estimate."""
    samples = []
    f = sock.makefile("rb")
    for _ in range(rounds):
        t_send = time.monotonic_ns()
        sock.sendall(b"T\n")
        line = f.readline()
        t_recv = time.monotonic_ns()
        if not line:
            break
        samples.append((t_send, int(line), t_recv))
    sock.sendall(b"E\n")
    return estimate_offset(samples)


def answer_clock(sock: socket.socket) -> int:
    """Client side of ``clock``: answer every ping with this host's CLOCK_MONOTONIC (ns)."""
    f = sock.makefile("rb")
    n = 0
    while True:
        line = f.readline()
        if line != b"T\n":
            return n
        sock.sendall(b"%d\n" % time.monotonic_ns())
        n += 1


# ------------------------------------------------------------------ relays
def splice(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways until either side closes (two threads)."""
    def pump(src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    t = threading.Thread(target=pump, args=(b, a), daemon=True)
    t.start()
    pump(a, b)
    t.join(timeout=5)
    a.close()
    b.close()


class Server:
    """The coordinator's side: a TCP listener on ``host`` that authenticates every connection, logs each
    refusal, relays ``relay`` connections into ``unix_path`` and keeps ``clock`` estimates."""

    def __init__(self, host: str, secret: bytes, unix_path: str | None = None, log=print, port: int = 0) -> None:
        self.secret, self.unix_path, self.log = secret, unix_path, log
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.sock.listen(256)
        self.address = self.sock.getsockname()
        self.refused: list[str] = []
        self.offsets: dict[str, Offset] = {}
        self.clock_done = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._accept, name="channel", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                conn, peer = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn, peer), daemon=True).start()

    def _serve(self, conn: socket.socket, peer) -> None:
        try:
            name, purpose = server_hello(conn, self.secret)
        except (ChannelRefused, OSError) as exc:
            line = f"control channel: refused {peer[0]}:{peer[1]}: {exc}"
            self.refused.append(line)
            self.log(line)
            conn.close()
            return
        if purpose == "clock":
            try:
                est = measure_clock(conn)
            except (OSError, ValueError) as exc:
                self.log(f"control channel: clock of {name} not measured: {exc}")
                conn.close()
                return
            with self.clock_done:
                self.offsets[name] = est
                self.clock_done.notify_all()
            conn.close()
            return
        if not self.unix_path:
            conn.close()
            return
        up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            up.connect(self.unix_path)
        except OSError as exc:
            self.log(f"control channel: {name}'s relay could not reach the coordinator: {exc}")
            conn.close()
            up.close()
            return
        splice(conn, up)

    def wait_clocks(self, names: list[str], timeout: float = 30.0) -> dict[str, Offset]:
        deadline = time.monotonic() + timeout
        with self.clock_done:
            while not all(n in self.offsets for n in names):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.clock_done.wait(left)
            return dict(self.offsets)

    def close(self) -> None:
        self._stop = True
        try:
            self.sock.close()
        except OSError:
            pass


def relay(unix_path: str, addr: tuple[str, int], secret: bytes, name: str, ready=None) -> None:
    """An agent host's side: listen on ``unix_path`` and forward each connection, authenticated, to the
    coordinator at ``addr``. Runs until killed (the command line's relay: until its stdin closes)."""
    try:
        os.unlink(unix_path)
    except FileNotFoundError:
        pass
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(unix_path)
    os.chmod(unix_path, 0o600)
    srv.listen(1024)
    if ready:
        ready()
    while True:
        conn, _ = srv.accept()

        def one(c=conn):
            try:
                up = connect(addr, secret, name, "relay")
            except (OSError, ChannelRefused):
                c.close()
                return
            splice(c, up)

        threading.Thread(target=one, daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    """``python -m traffic.runtime.channel relay|clock --to ADDR:PORT --secret-file F --name HOST [--unix P]``."""
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="traffic.runtime.channel")
    ap.add_argument("action", choices=("relay", "clock"))
    ap.add_argument("--to", required=True)
    ap.add_argument("--secret-file", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--unix")
    args = ap.parse_args(argv)
    host, _, port = args.to.rpartition(":")
    with open(args.secret_file, "rb") as fh:
        secret = bytes.fromhex(fh.read().decode().strip())
    if args.action == "clock":
        sock = connect((host, int(port)), secret, args.name, "clock")
        print(answer_clock(sock))
        return 0
    if not args.unix:
        print("relay needs --unix PATH", file=sys.stderr)
        return 2
    threading.Thread(target=_exit_on_eof, args=(args.unix,), daemon=True, name="stdin").start()
    relay(args.unix, (host, int(port)), secret, args.name, ready=lambda: print("ready", flush=True))
    return 0


def _exit_on_eof(unix_path: str) -> None:
    """The relay lives as long as whatever started it holds its stdin (an SSH channel: a closed or lost
    connection ends it), then removes its socket."""
    import sys

    while sys.stdin.buffer.read(4096):
        pass
    try:
        os.unlink(unix_path)
    except OSError:
        pass
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main())
