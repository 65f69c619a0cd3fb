"""The queue-watch BPF programs (queue_watch.bpf.c): compiled, attached to the datapath, unpinned.

``up`` compiles queue_watch.bpf.c (clang, ~0.3 s) into the state directory
and attaches, through the same ``tc -batch`` that builds the queues, the
enqueue counter at the clsact egress hook of every switch queue's device (prio 2:
the failover benchmark's reaction watch goes before it at prio 1) and
the departure counter at the ingress hook of every queue's veth peer (switch
queues and host NIC queues; all peers are in the root namespace). tc's
libbpf loader pins the maps by name in PIN_DIR, where the pause daemon finds
them. Only with PFC on: without it nothing is attached.
"""

from __future__ import annotations

import os
import subprocess
import sysconfig
from pathlib import Path

from common.errors import EnvironmentProblem
from pfc.bpfmaps import PIN_DIR

SOURCE = Path(__file__).with_name("queue_watch.bpf.c")
MAPS = ("tb_queues", "tb_enq_slot", "tb_deq_slot", "tb_src", "tb_seen", "tb_bell")


def compile_object(out: Path) -> Path:
    """Compile the programs for this machine's headers (the asm/ folder is per architecture)."""
    return compile_bpf(SOURCE, out, "PFC's queue counters")


def compile_bpf(source: Path, out: Path, needed_for: str) -> Path:
    """Compile one of our tc BPF programs with clang for this machine's headers; one line if it cannot."""
    multiarch = sysconfig.get_config_var("MULTIARCH") or "x86_64-linux-gnu"
    cmd = ["clang", "-O2", "-g", "-target", "bpf", f"-I/usr/include/{multiarch}", "-c", str(source), "-o", str(out)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise EnvironmentProblem(f"clang is not installed (needed for {needed_for}): run scripts/setup.sh")
    if proc.returncode:
        raise EnvironmentProblem(f"compiling {source.name} failed: {proc.stderr.strip().splitlines()[-1:]}")
    return out


def ensure_bpffs() -> None:
    """Mount the BPF filesystem if it is not: tc pins the maps there for the pause daemon."""
    if not os.path.ismount("/sys/fs/bpf"):
        proc = subprocess.run(["mount", "-t", "bpf", "bpf", "/sys/fs/bpf"], capture_output=True, text=True)
        if proc.returncode:
            raise EnvironmentProblem(f"cannot mount the BPF filesystem on /sys/fs/bpf: {proc.stderr.strip()}")


def remove_pins() -> list[str]:
    """Unpin our maps (the kernel frees them once no program holds them)."""
    removed = []
    for name in MAPS:
        path = os.path.join(PIN_DIR, name)
        if os.path.exists(path):
            os.unlink(path)
            removed.append(path)
    return removed


def tc_lines(queues, obj: Path, clsact_ready: set[str]) -> list[str]:
    """Root-namespace tc batch lines attaching the counters; ``clsact_ready``
    names devices that already have a clsact qdisc."""
    lines = []
    for q in queues:
        if q.kind == "switch":
            lines += [f"qdisc replace dev {q.dev} clsact",
                      f"filter add dev {q.dev} egress prio 2 bpf da obj {obj} sec tc/enqueue"]
        if q.peer not in clsact_ready:
            lines.append(f"qdisc replace dev {q.peer} clsact")
        lines.append(f"filter add dev {q.peer} ingress prio 1 bpf da obj {obj} sec tc/dequeue")
    return lines
