"""The queue sampler: every fabric queue's counters about once a second during a repetition."""

from __future__ import annotations

import threading
import time

from common.errors import EnvironmentProblem
from testbed.backends.base import QueueCounters, QueueInfo, Snapshot
from testbed.emulation import qstats
from testbed.emulation.state import FabricState


class QueueSampler:
    """Samples every fabric queue (backlog, drops, bytes sent) through netlink about once a second
    (``qstats``: one raw dump per namespace over sockets kept open for the run, ~4 ms a sample on ZCube
    n=32 where pyroute2 took ~0.23 s); keeps every sample (queues.csv; counters going down between
    two are a measurement invariant of the write-up) and the first and last for
    per-link totals and drops (``counters``).

    Only complete samples count: a queue without its bfifo counters (device or
    namespace already gone) ends the sampling instead of reading as 0, which is
    what gave links.csv negative bytes when the last sample ran into the
    fabric's teardown. ``start`` returns after the first sample (the
    counters start from a quiet fabric); ``stop`` waits for the last; a sample
    that finishes after ``stop`` gave up waiting is discarded. Errors (the
    fabric went away under the thread) end the thread quietly and are kept in
    ``error``."""

    PERIOD_S = 1.0
    WAIT_S = 30.0  # longest start() waits for the first sample and stop() for the last

    def __init__(self, st: FabricState) -> None:
        self.st = st
        self.first: Snapshot = {}
        self.last: Snapshot = {}
        self.t_first = self.t_last = 0.0
        self.read_s = 0.0  # the longest sample read
        self.samples: list[tuple[float, Snapshot]] = []
        self.error: str | None = None
        self._closed = False
        self._lock = threading.Lock()
        self._first_done = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="queue-sampler", daemon=True)
        self._reader: qstats.QueueReader | None = None

    def _sample(self) -> None:
        t = time.monotonic()
        if self._reader is None:
            self._reader = qstats.QueueReader(self.st.queues)
        rows = {q["queue"]: q for q in self._reader.read()}
        gone = [q for q, r in rows.items() if "bytes" not in r]
        if gone:
            raise EnvironmentProblem(f"{len(gone)} of {len(rows)} queues have no counters (e.g. {gone[0]}): "
                                     "the fabric is going away")
        with self._lock:
            if self._closed:
                return
            self.read_s = max(self.read_s, time.monotonic() - t)
            if not self.first:
                self.first, self.t_first = rows, t
            self.last, self.t_last = rows, t
            self.samples.append((t, rows))

    def _run(self) -> None:
        try:
            while True:
                self._sample()
                self._first_done.set()
                if self._stop.wait(self.PERIOD_S):
                    self._sample()
                    return
        except Exception as exc:  # noqa: BLE001 - e.g. FileNotFoundError: /run/netns/tb-gpu1 (fabric gone)
            if not self._closed:
                self.error = f"sampling stopped after {len(self.samples)} samples: {type(exc).__name__}: {exc}"
        finally:
            if self._reader is not None:
                self._reader.close()  # its sockets would keep the namespaces alive
            self._first_done.set()

    def start(self) -> None:
        self._thread.start()
        self._first_done.wait(self.WAIT_S)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.WAIT_S)
        with self._lock:
            self._closed = True
            if self._thread.is_alive() and self.error is None:
                self.error = f"the last sample did not finish within {self.WAIT_S:g} s of stop: the counters end early"

    def counters(self) -> QueueCounters:
        """What was sampled, for the write-up (after ``stop``)."""
        with self._lock:
            return QueueCounters([QueueInfo(q["qid"], q["kind"], q["towards"]) for q in self.st.queues],
                                 self.first, self.last, self.t_first, self.t_last, list(self.samples), self.error,
                                 self.read_s)
