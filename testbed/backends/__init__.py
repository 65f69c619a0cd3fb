"""Network backends: what carries a repetition's messages and returns their arrivals and the fabric's
counters (the seam: ``testbed.backends.base``).

* ``emulated``: the emulated fabric (Open vSwitch, namespaces, real TCP; root), ``testbed.backends.emulated``;
* ``ideal``: the ideal network (no fabric, no root), ``testbed.backends.ideal``;
* ``ns3``: the ns-3 twin (a packet-level simulated fabric, no root), ``testbed.backends.ns3``;
* ``fluid``: the flow-level network (every message a flow, max-min fair rates, no root), ``testbed.backends.fluid``.

``get(name, hosts)`` returns one (the emulated one over several machines when given a hosts file); a new
backend adds its name and loader here.
"""

from __future__ import annotations

from typing import Callable

from common.errors import TestbedError
from testbed.backends.base import Backend

TUNNEL_ENV = "TESTBED_TUNNEL"  # the cables between hosts: vxlan (default) or gretap (a testing knob)


def _emulated(hosts: str | None = None) -> Backend:
    if hosts:
        import os

        from testbed.backends.emulated.multihost import MultiHostBackend

        return MultiHostBackend(hosts, os.environ.get(TUNNEL_ENV, "vxlan"))
    from testbed.backends.emulated.backend import EmulatedBackend

    return EmulatedBackend()


def _ideal() -> Backend:
    from testbed.backends.ideal import IdealBackend

    return IdealBackend()


def _fluid() -> Backend:
    from testbed.backends.fluid.backend import FluidBackend

    return FluidBackend()


def _ns3() -> Backend:
    from testbed.backends.ns3.backend import Ns3Backend

    return Ns3Backend()


_LOADERS: dict[str, Callable[[], Backend]] = {"emulated": _emulated, "ideal": _ideal, "ns3": _ns3, "fluid": _fluid}
NAMES = tuple(_LOADERS)
DEFAULT = "emulated"
OVER_HOSTS = ("emulated",)  # the backends a hosts file can spread
ROUTE_THEMSELVES = ("ns3", "fluid")  # the backends that pick each path (Backend.routes_itself): paths_from
FORKING = ("ideal", "fluid")  # the backends whose repetitions run at once in forked processes (Backend.forks): jobs


def get(name: str, hosts: str | None = None) -> Backend:
    """The backend called ``name``; ``hosts``: a hosts file to spread the emulated fabric over."""
    if name not in _LOADERS:
        raise TestbedError(f"backend {name!r} is unknown: expected one of {', '.join(NAMES)}", key="backend")
    if hosts and name not in OVER_HOSTS:
        raise TestbedError(f"the {name} backend runs on this machine: a hosts file needs the "
                           f"{' or '.join(OVER_HOSTS)} backend", key="hosts")
    return _emulated(hosts) if name == "emulated" else _LOADERS[name]()
