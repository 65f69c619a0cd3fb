"""ns-3 in this process: import the wheel's bindings and compile the twin's C++ (``twin.cc``) once.

``from ns import ns`` starts cling (about 9-12 s here); ``cppyy.cppdef`` then compiles the switch,
queue, PFC and connection code, so per-packet work stays in C++ and Python is called once per message.
TCP is set as the emulator's Linux hosts run it: CUBIC, MSS = MTU - 52 (timestamps), a 200 ms minimum
RTO, delayed ACKs every 2 segments or 40 ms, an initial window of 10 segments (the experiment's ``twin``
section can change each, for the ablation).
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

from common import scale
from common.errors import EnvironmentProblem
from testbed.backends.ns3 import assumptions

SOURCE = Path(__file__).with_name("twin.cc")
_loaded: dict = {}


def available() -> bool:
    """True when the ns3 wheel is installed (without importing it: that takes seconds)."""
    return importlib.util.find_spec("ns") is not None and importlib.util.find_spec("cppyy") is not None


def load():
    """The ``tb`` C++ namespace (``cppyy.gbl.tb``), loading ns-3 and compiling the twin on first use."""
    if "tb" in _loaded:
        return _loaded["tb"]
    if not available():
        raise EnvironmentProblem("the ns3 backend needs the ns3 package: pip install ns3==3.44.post0 "
                                 "(scripts/setup.sh installs it)")
    t = time.monotonic()
    import cppyy
    from ns import ns  # noqa: F401 - loads the libraries and headers into cling

    cppyy.cppdef(SOURCE.read_text())
    _loaded["tb"] = cppyy.gbl.tb
    _loaded["ns"] = cppyy.gbl.ns3
    _loaded["load_s"] = round(time.monotonic() - t, 2)
    return _loaded["tb"]


def load_s() -> float:
    """Seconds the first ``load`` took (0 before it)."""
    return _loaded.get("load_s", 0.0)


def configure(mtu: int, seed: int, twin=None) -> None:
    """Global ns-3 defaults for one run: TCP as Linux runs it (``twin``: the experiment's ``twin`` section, or
    any object with ``assumptions.Assumptions``' names; None: the defaults), the random streams' seed."""
    twin = assumptions.DEFAULT if twin is None else twin
    load()
    ns3 = _loaded["ns"]
    cfg = ns3.Config.SetDefault
    cfg("ns3::TcpL4Protocol::SocketType", ns3.TypeIdValue(ns3.TypeId.LookupByName(assumptions.TCP[twin.tcp])))
    cfg("ns3::TcpSocket::SegmentSize", ns3.UintegerValue(scale.payload_bytes(mtu)))
    cfg("ns3::TcpSocket::DelAckCount", ns3.UintegerValue(twin.delack_count))
    cfg("ns3::TcpSocket::DelAckTimeout", ns3.TimeValue(ns3.MicroSeconds(round(twin.delack_timeout_ms * 1000))))
    cfg("ns3::TcpSocket::InitialCwnd", ns3.UintegerValue(twin.initial_cwnd))
    cfg("ns3::TcpSocket::SndBufSize", ns3.UintegerValue(1 << 20))
    cfg("ns3::TcpSocket::RcvBufSize", ns3.UintegerValue(1 << 20))
    cfg("ns3::TcpSocketBase::MinRto", ns3.TimeValue(ns3.MicroSeconds(round(twin.min_rto_ms * 1000))))
    cfg("ns3::TcpSocketBase::ClockGranularity", ns3.TimeValue(ns3.MilliSeconds(1)))
    ns3.RngSeedManager.SetSeed(1 + seed % (2**31 - 2))
    ns3.RngSeedManager.SetRun(1)
