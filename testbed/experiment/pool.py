"""Repetitions carried at once, each in a forked process of its own (the experiment's ``jobs``), for the backends
that compute rather than replay in real time: a simulated repetition is one CPU-bound process, so a machine
with c cores runs c of them in the time of one, and the run's files are the same as one at a time (each
repetition writes only its own folder).

The workers are forked (nothing is pickled: they inherit the experiment and the backend), die with the run
(parent-death signal: a SIGKILLed run leaves none behind), and send what they print to the run's log, each
line prefixed with its repetition; their stderr is not a terminal, so no worker draws a progress bar of its
own: the run draws one over its repetitions. A worker that ends without an outcome (killed, out of memory)
is that repetition's error, the others go on. Ctrl-C stops every worker, each unfinished repetition noted as
interrupted, and stops the run.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import sys
from pathlib import Path
from typing import Callable

from traffic.runtime.launcher import die_with_parent

Log = Callable[[str], None]
POLL_S = 0.5  # how often a worker that died without a word is looked for
MEMORY_SHARE = 0.8  # of the memory available, what repetitions at once may take together (the rest: the run)


def cpus() -> int:
    """The CPUs this process may run on (its affinity, not the machine's count)."""
    return len(os.sched_getaffinity(0))


def available_bytes() -> float:
    """Memory the machine can give without swapping (/proc/meminfo's MemAvailable)."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return float(line.split()[1]) * 1024
    return float("inf")


class _Lines:
    """A worker's stderr: every line goes to the run's log, prefixed; not a terminal (so no progress bars)."""

    def __init__(self, send: Callable[[str], None]) -> None:
        self.send, self.part = send, ""

    def write(self, text: str) -> int:
        self.part += text
        *lines, self.part = self.part.split("\n")
        for line in lines:
            if line.strip():
                self.send(line)
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def _worker(messages, index: int, label: str, work: Callable[[Log], dict]) -> None:
    die_with_parent(signal.SIGTERM)

    def send(line: str) -> None:
        messages.put(("log", index, f"{label}: {line}"))

    sys.stderr = _Lines(send)
    code = 0
    try:
        messages.put(("done", index, work(send)))
    except KeyboardInterrupt:
        code = 130  # the repetition has written its note (``work`` does), the run stops
    messages.close()
    messages.join_thread()  # everything put is in the pipe before the process ends
    os._exit(code)


def run_all(works: list[tuple[str, Callable[[Log], dict]]], jobs: int, log: Log,
            ended: Callable[[int, dict], None], failed: Callable[[int, str], dict],
            interrupted: Callable[[int], None]) -> None:
    """Run ``works`` ((label, work(log) -> outcome)) with at most ``jobs`` at once, in order;
    ``ended(i, outcome)`` as each ends, in the order they end; ``failed(i, why)`` makes the outcome of a worker
    that ended without one; ``interrupted(i)`` notes a repetition stopped by Ctrl-C."""
    ctx = multiprocessing.get_context("fork")
    messages = ctx.Queue()
    waiting = list(range(len(works)))
    running: dict[int, multiprocessing.process.BaseProcess] = {}
    try:
        while waiting or running:
            while waiting and len(running) < jobs:
                i = waiting.pop(0)
                label, work = works[i]
                running[i] = ctx.Process(target=_worker, args=(messages, i, label, work), daemon=True)
                running[i].start()
            try:
                kind, i, body = messages.get(timeout=POLL_S)
            except queue.Empty:
                _bury(messages, log, ended, failed, running)
                continue
            _handle(kind, i, body, log, ended, running)
    except KeyboardInterrupt:
        for proc in running.values():
            proc.terminate()
        for i, proc in running.items():
            proc.join()
            interrupted(i)
        raise
    finally:
        messages.close()


def _handle(kind: str, i: int, body, log: Log, ended, running: dict) -> None:
    if kind == "log":
        log(body)
        return
    running.pop(i).join()
    ended(i, body)


def _bury(messages, log: Log, ended, failed, running: dict) -> None:
    """Workers that have ended: what they sent handled first; one that sent no outcome has failed."""
    dead = [i for i, proc in running.items() if proc.exitcode is not None]
    if not dead:
        return
    while True:
        try:
            kind, i, body = messages.get(timeout=POLL_S)
        except queue.Empty:
            break
        _handle(kind, i, body, log, ended, running)
    for i in dead:
        if i in running:
            code = running.pop(i).exitcode
            ended(i, failed(i, f"its process ended with exit code {code} before it finished"))


__all__ = ["run_all", "cpus", "available_bytes", "POLL_S", "MEMORY_SHARE"]
