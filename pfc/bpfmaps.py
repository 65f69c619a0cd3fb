"""The queue-watch BPF maps from Python, without a BPF library: the bpf(2)
syscall through ctypes for the two calls we need (open a pinned map, update
a hash entry) and mmap for the counters, so the pause daemon reads
every queue's state with plain memory loads, and for the doorbell ring.

The layout of ``struct qstate`` mirrors queue_watch.bpf.c.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import select

import numpy as np

PIN_DIR = "/sys/fs/bpf/tc/globals"  # where tc's libbpf loader pins maps declared LIBBPF_PIN_BY_NAME
MAX_QUEUES = 2048
MAX_NICS = 256
FIELDS = ("enq_bytes", "deq_bytes", "drop_adjust", "xoff", "xon", "over", "xoff_ns", "xon_ns", "last_deq_ns",
          "resume_mark", "first_deq_ns", "max_backlog", "ctl_deq_ns", "alpha_x256", "shared", "sw_slot", "xoff_at")
QSTATE_WORDS = 24  # 17 fields + 7 pad, u64 each
F = {name: i for i, name in enumerate(FIELDS)}

_SYS_BPF = 321  # x86_64
_BPF_MAP_UPDATE_ELEM, _BPF_OBJ_GET = 2, 7
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _ObjGet(ctypes.Structure):
    _fields_ = [("pathname", ctypes.c_uint64), ("bpf_fd", ctypes.c_uint32), ("file_flags", ctypes.c_uint32),
                ("pad", ctypes.c_uint8 * 112)]


class _MapElem(ctypes.Structure):
    _fields_ = [("map_fd", ctypes.c_uint32), ("pad0", ctypes.c_uint32), ("key", ctypes.c_uint64),
                ("value", ctypes.c_uint64), ("flags", ctypes.c_uint64), ("pad", ctypes.c_uint8 * 96)]


def _bpf(cmd: int, attr: ctypes.Structure) -> int:
    ret = _libc.syscall(_SYS_BPF, cmd, ctypes.byref(attr), ctypes.sizeof(attr))
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"bpf({cmd}): {os.strerror(err)}")
    return ret


def open_pinned(name: str) -> int:
    path = ctypes.create_string_buffer(os.path.join(PIN_DIR, name).encode())
    attr = _ObjGet(pathname=ctypes.addressof(path))
    return _bpf(_BPF_OBJ_GET, attr)


def update_u32(map_fd: int, key: int, value: int) -> None:
    """Set a u32 -> u32 hash entry (ifindex -> slot, IPv4 source -> NIC index)."""
    key, value = ctypes.c_uint32(key), ctypes.c_uint32(value)
    _bpf(_BPF_MAP_UPDATE_ELEM, _MapElem(map_fd=map_fd, key=ctypes.addressof(key), value=ctypes.addressof(value)))


def ip_key(ip: str) -> int:
    """An IPv4 address as the u32 the BPF program reads from the header (network byte order in memory)."""
    import socket
    import struct

    return struct.unpack("=I", socket.inet_aton(ip))[0]


class QueueTable:
    """A pinned BPF array mapped into this process as a 2-D u64 table: tb_queues
    (``table[slot, F['enq_bytes']]``) or tb_seen (``table[slot, nic]``)."""

    def __init__(self, name: str = "tb_queues", columns: int = QSTATE_WORDS) -> None:
        self.fd = open_pinned(name)
        size = MAX_QUEUES * columns * 8
        self._mm = mmap.mmap(self.fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        self.table = np.frombuffer(self._mm, dtype=np.uint64).reshape(MAX_QUEUES, columns)

    def close(self) -> None:
        del self.table
        self._mm.close()
        os.close(self.fd)


class Doorbell:
    """The tb_bell ring buffer, used only to be woken: the kernel writes a
    record at every XOFF/XON crossing, ``wait`` returns as soon as one is
    there (or after the timeout) and skips every record. Ring layout (kernel
    ABI): page 0 holds the reader's position (writable), page 1 the writer's."""

    def __init__(self, name: str = "tb_bell") -> None:
        self.fd = open_pinned(name)
        page = mmap.PAGESIZE
        self._reader = mmap.mmap(self.fd, page, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        self._writer = mmap.mmap(self.fd, page, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ, offset=page)
        self.read_pos = np.frombuffer(self._reader, dtype=np.uint64, count=1)
        self.write_pos = np.frombuffer(self._writer, dtype=np.uint64, count=1)
        self.rings = 0

    def wait(self, timeout_s: float) -> bool:
        """Block until a crossing rang or ``timeout_s`` passed (select: microsecond
        timeouts, where epoll has milliseconds). True if it rang."""
        ready, _, _ = select.select([self.fd], [], [], timeout_s)
        if ready:
            self.skip()
            self.rings += 1
        return bool(ready)

    def skip(self) -> None:
        """Mark every record read (the queue table, not the ring, says what changed)."""
        self.read_pos[0] = self.write_pos[0]

    def close(self) -> None:
        del self.read_pos, self.write_pos
        self._reader.close()
        self._writer.close()
        os.close(self.fd)
