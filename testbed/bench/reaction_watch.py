"""The reaction watch (reaction_watch.bpf.c): when each stream left each switch port, stamped in the kernel.

``attach`` compiles the program (clang, ~0.3 s) and adds it through one ``tc -batch`` at the clsact egress
hook of every switch transmit port ``<sw>-eth<n>`` at prio 1, ahead of PFC's queue counter (prio 2; the
watch passes every packet on). The egress hook sees what Open vSwitch hands to the port before the port's
queue, and also after the port lost carrier (the device then drops it), so for a cut the benchmark can
tell how long the switch kept sending into the dead port and when a stream first left by another one: the
switch's own reaction, without the queues' delay or the probes' one-way delay. ``epoch`` starts every row
again at its next packet; ``rows`` reads the map through the bpf(2) syscall (no BPF library needed).
``detach`` removes the filters and the pinned maps.

The pure part (``parse_row``, ``clsact_devices``, ``tc_lines``, ``stream_reactions``) is what the tests hold.
"""

from __future__ import annotations

import ctypes
import os
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

from common.errors import EnvironmentProblem
from pfc import queue_watch
from pfc.bpfmaps import PIN_DIR, open_pinned
from pfc.queue_watch import ensure_bpffs

SOURCE = Path(__file__).with_name("reaction_watch.bpf.c")
MAPS = ("tb_rw_flows", "tb_rw_cfg")
PRIO = 1  # before the queue watch (pfc.queue_watch: prio 2)
KEY = struct.Struct("=4s4sIHHB3x")  # struct rw_key
VAL = struct.Struct("=QQQQ")  # struct rw_val
UDP, TCP = 17, 6

_SYS_BPF = 321  # x86_64
_LOOKUP, _UPDATE, _NEXT_KEY = 1, 2, 4
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _Elem(ctypes.Structure):
    _fields_ = [("map_fd", ctypes.c_uint32), ("pad0", ctypes.c_uint32), ("key", ctypes.c_uint64),
                ("value", ctypes.c_uint64), ("flags", ctypes.c_uint64), ("pad", ctypes.c_uint8 * 96)]


def _bpf(cmd: int, fd: int, key, value) -> int:
    attr = _Elem(map_fd=fd, key=ctypes.addressof(key) if key is not None else 0, value=ctypes.addressof(value))
    ret = _libc.syscall(_SYS_BPF, cmd, ctypes.byref(attr), ctypes.sizeof(attr))
    return 0 if ret >= 0 else ctypes.get_errno()


@dataclass(frozen=True)
class Row:
    """One (stream, device) row: a stream is (source, source port, destination, destination port, protocol)."""

    src: str
    sport: int
    dst: str
    dport: int
    proto: int
    ifindex: int
    epoch: int
    first_ns: int
    last_ns: int
    packets: int

    @property
    def stream(self) -> tuple[str, int, str, int, int]:
        return self.src, self.sport, self.dst, self.dport, self.proto


def _ip(raw: bytes) -> str:
    return ".".join(str(b) for b in raw)


def parse_row(key: bytes, value: bytes) -> Row:
    """A map entry as the kernel stores it (addresses in network order, ports in host order)."""
    saddr, daddr, ifindex, sport, dport, proto = KEY.unpack(key)
    epoch, first, last, packets = VAL.unpack(value)
    return Row(_ip(saddr), sport, _ip(daddr), dport, proto, ifindex, epoch, first, last, packets)


def clsact_devices(tc_qdisc_show: str) -> set[str]:
    """Devices that already have a clsact qdisc, from ``tc qdisc show`` (``qdisc clsact ffff: dev X parent``)."""
    out = set()
    for line in tc_qdisc_show.splitlines():
        words = line.split()
        if len(words) >= 5 and words[0] == "qdisc" and words[1] == "clsact" and words[3] == "dev":
            out.add(words[4])
    return out


def tc_lines(devs: list[str], obj: Path, have_clsact: set[str]) -> list[str]:
    """Root-namespace tc batch lines attaching the watch to every device's egress."""
    lines = []
    for dev in devs:
        if dev not in have_clsact:
            lines.append(f"qdisc add dev {dev} clsact")
        lines.append(f"filter add dev {dev} egress prio {PRIO} handle 1 bpf da obj {obj} sec tc/react")
    return lines


def stream_reactions(rows: list[Row], epoch: int, dead: dict[int, int], clear_ns: int) -> list[dict]:
    """Per stream that left by a dead port (``dead``: ifindex -> when it lost carrier, ns) before the port's cut
    in ``epoch``: ``reaction_ms``, from the cut to the first packet out of a port the stream had not used in the
    epoch before the cut (the switch, or one upstream of it, moved it; None when none did before the clear),
    and ``into_dead_ms``, from the cut to the last packet still handed to a dead port (0 when none was after
    the cut): the switch's reaction lies between the two, and the two meet when the stream's packets reach the
    switch steadily."""
    by: dict[tuple, list[Row]] = {}
    for r in rows:
        if r.epoch == epoch:
            by.setdefault(r.stream, []).append(r)
    out = []
    for stream, mine in sorted(by.items()):
        on_dead = [r for r in mine if r.ifindex in dead and r.first_ns < dead[r.ifindex]]
        if not on_dead:
            continue
        cut_ns = min(dead[r.ifindex] for r in on_dead)
        new = [r.first_ns for r in mine if r.ifindex not in dead and cut_ns <= r.first_ns < clear_ns]
        last_dead = max(r.last_ns for r in on_dead)
        src, sport, dst, dport, proto = stream
        out.append({"src": src, "sport": sport, "dst": dst, "dport": dport, "proto": proto,
                    "reaction_ms": round((min(new) - cut_ns) / 1e6, 2) if new else None,
                    "into_dead_ms": round(max(0, last_dead - cut_ns) / 1e6, 2),
                    "ports_new": len(new)})
    return out


# ------------------------------------------------------------------ the kernel side
def compile_object(out: Path) -> Path:
    return queue_watch.compile_bpf(SOURCE, out, "the reaction watch")


def _tc_batch(lines: list[str], force: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run(["tc", *(["-force"] if force else []), "-batch", "-"], input="\n".join(lines) + "\n",
                          capture_output=True, text=True, timeout=120)


class Watch:
    """The attached watch: ``epoch(n)``, ``rows()``, ``ifindex`` (device -> ifindex), ``close()``."""

    def __init__(self, devs: list[str], workdir: Path, port: int = 0) -> None:
        from pyroute2 import IPRoute

        ensure_bpffs()
        remove_pins()
        self.obj = compile_object(workdir / "reaction_watch.o")
        obj = self.obj
        shown = subprocess.run(["tc", "qdisc", "show"], capture_output=True, text=True, timeout=30).stdout
        self.devs = list(devs)
        proc = _tc_batch(tc_lines(self.devs, obj, clsact_devices(shown)))
        if proc.returncode:
            self.close()
            raise EnvironmentProblem(f"attaching the reaction watch failed: {proc.stderr.strip().splitlines()[-1:]}")
        with IPRoute() as ipr:
            self.ifindex = {link.get_attr("IFLA_IFNAME"): link["index"] for link in ipr.get_links()}
        self.flows = open_pinned("tb_rw_flows")
        self.cfg = open_pinned("tb_rw_cfg")
        self._set(1, port)

    def _set(self, slot: int, value: int) -> None:
        key, val = ctypes.c_uint32(slot), ctypes.c_uint64(value)
        err = _bpf(_UPDATE, self.cfg, key, val)
        if err:
            raise OSError(err, f"reaction watch: setting tb_rw_cfg[{slot}]: {os.strerror(err)}")

    def epoch(self, n: int) -> None:
        """Start epoch ``n``: every row starts again at its next packet."""
        self._set(0, n)

    def rows(self) -> list[Row]:
        out = []
        key, nxt = ctypes.create_string_buffer(KEY.size), ctypes.create_string_buffer(KEY.size)
        val = ctypes.create_string_buffer(VAL.size)
        first = True
        while not _bpf(_NEXT_KEY, self.flows, None if first else key, nxt):
            first = False
            ctypes.memmove(key, nxt, KEY.size)
            if not _bpf(_LOOKUP, self.flows, key, val):
                out.append(parse_row(key.raw, val.raw))
        return out

    def close(self) -> None:
        for name in ("flows", "cfg"):
            fd = getattr(self, name, None)
            if fd is not None:
                os.close(fd)
                setattr(self, name, None)
        _tc_batch([f"filter del dev {d} egress prio {PRIO}" for d in self.devs], force=True)
        remove_pins()
        self.obj.unlink(missing_ok=True)


def remove_pins() -> None:
    for name in MAPS:
        path = os.path.join(PIN_DIR, name)
        if os.path.exists(path):
            os.unlink(path)
