"""QueueSampler (testbed.backends.emulated.sampler) without a fabric: its netlink reader (qstats.QueueReader)
replaced by a script of samples.
It must keep only complete samples, stop quietly when the fabric goes away under it, and never
let a late sample (the fabric's teardown) replace the last one (issue 14's negative bytes)."""

from __future__ import annotations

import threading
import time

import pytest

from fabrics import build_fabric
from testbed.backends.base import LinkSettings
from testbed.backends.emulated import sampler
from testbed.emulation.state import FabricState

ST = FabricState(queues=[{"qid": "spine2:1", "kind": "switch", "towards": "leaf1"},
                         {"qid": "gpu1:p1", "kind": "nic", "towards": "leaf1"}])


def rows(b1, b2, drops=0):
    return [{"queue": "spine2:1", "towards": "leaf1", "kind": "switch", "backlog": 0, "qlen": 0, "drops": drops,
             "packets": b1 // 100, "bytes": b1},
            {"queue": "gpu1:p1", "towards": "leaf1", "kind": "nic", "backlog": 0, "qlen": 0, "drops": 0,
             "packets": b2 // 100, "bytes": b2}]


def wait_for(cond, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


READ: dict = {}  # "read": what the fake reader's read() calls (a test may swap it mid-run)


class FakeReader:
    """qstats.QueueReader's seam: opened once per run, read every sample, closed at the end."""

    opened: list = []

    def __init__(self, queues):
        FakeReader.opened.append(self)
        self.closed = False

    def read(self):
        return READ["read"]()

    def close(self):
        self.closed = True


@pytest.fixture
def script(monkeypatch):
    """The reader's read() returns (or raises) the next item of the list; afterwards it repeats the last."""
    items: list = []
    calls = {"n": 0}

    def read_queues():
        i = min(calls["n"], len(items) - 1)
        calls["n"] += 1
        item = items[i]
        if isinstance(item, BaseException):
            raise item
        return [dict(r) for r in item]

    READ["read"] = read_queues
    FakeReader.opened = []
    monkeypatch.setattr(sampler.qstats, "QueueReader", FakeReader)
    monkeypatch.setattr(sampler.QueueSampler, "PERIOD_S", 0.01)
    return items


@pytest.fixture
def no_thread_tracebacks(monkeypatch):
    seen = []
    monkeypatch.setattr(threading, "excepthook", lambda args: seen.append(args))
    yield seen
    assert seen == [], "an exception escaped the sampler thread"


def test_samples_and_deltas(script, tmp_path, no_thread_tracebacks):
    script += [rows(1000, 500), rows(4000, 900), rows(9000, 1500, drops=2)]
    s = sampler.QueueSampler(ST)
    s.start()
    assert len(s.samples) >= 1 and s.first  # start() returns once the first sample is in
    wait_for(lambda: len(s.samples) >= 3)
    s.stop()
    c = s.counters()
    assert c.error is None and len(c.samples) >= 3 and c.samples[0][0] == c.t_first and c.samples[-1][0] == c.t_last
    assert c.link_bytes() == {"spine2:1": ("leaf1", 8000), "gpu1:p1": ("leaf1", 1000)}
    assert c.drops() == 2 and c.drops("switch") == 2 and c.drops("nic") == 0
    assert len(FakeReader.opened) == 1 and FakeReader.opened[0].closed  # one reader a run, closed at the end


def test_the_fabric_going_away_ends_the_thread_quietly(script, tmp_path, no_thread_tracebacks, capsys):
    script += [rows(1000, 500), rows(4000, 900), FileNotFoundError(2, "No such file or directory",
                                                                    "/run/netns/tb-gpu1")]
    s = sampler.QueueSampler(ST)
    s.start()
    s._thread.join(5)
    assert not s._thread.is_alive()
    assert s.error == ("sampling stopped after 2 samples: FileNotFoundError: [Errno 2] No such file or directory: "
                       "'/run/netns/tb-gpu1'")
    s.stop()
    assert s.counters().link_bytes()["spine2:1"] == ("leaf1", 3000)
    assert capsys.readouterr().err == ""


def test_a_sample_with_a_missing_counter_is_not_read_as_zero(script, tmp_path, no_thread_tracebacks):
    """The teardown deleted spine2-eth1 while a sample was running: its row came back without bytes."""
    gone = rows(9000, 1500)
    del gone[0]["bytes"], gone[0]["backlog"], gone[0]["drops"], gone[0]["packets"]
    script += [rows(1000, 500), rows(4000, 900), gone]
    s = sampler.QueueSampler(ST)
    s.start()
    s._thread.join(5)
    s.stop()
    assert "1 of 2 queues have no counters (e.g. spine2:1)" in s.error
    assert all(b >= 0 for _, b in s.counters().link_bytes().values())
    assert s.counters().link_bytes()["spine2:1"] == ("leaf1", 3000)


def test_a_sample_finishing_after_stop_gave_up_is_discarded(script, tmp_path, no_thread_tracebacks):
    release = threading.Event()
    script += [rows(1000, 500)]
    s = sampler.QueueSampler(ST)
    s.start()

    def slow():  # the last sample hangs until after stop() has given up
        release.wait(5)
        return rows(0, 0)  # what a sample of a half torn-down fabric might say

    READ["read"] = slow
    s.WAIT_S = 0.05
    s.stop()
    assert s._thread.is_alive() and "did not finish within 0.05 s" in s.error
    release.set()
    s._thread.join(5)
    assert s.last["spine2:1"]["bytes"] == 1000  # not the late sample


def test_counters_going_down_between_samples_are_kept_for_the_invariants(script, tmp_path, no_thread_tracebacks):
    from testbed.repetition.writeup import check_invariants

    script += [rows(1000, 500), rows(800, 600)]
    s = sampler.QueueSampler(ST)
    s.start()
    wait_for(lambda: len(s.samples) >= 2)
    s.stop()
    link = LinkSettings(3e6, 3000, 18000, 60000, 3_014_000, 400e9)
    inv = check_invariants(tmp_path, link, s.counters(), [], False, build_fabric("zcube", 16, 8))
    assert any(v.startswith("counters_monotonic: spine2:1: bytes went down by 200 between samples at")
               for v in inv["violations"]), inv["violations"]
