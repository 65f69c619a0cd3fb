"""Network backends: what carries a repetition's messages and returns their arrivals and the fabric's
counters (the seam: ``testbed.backends.base``).

* ``emulated``: the emulated fabric (Open vSwitch, namespaces, real TCP; root), ``testbed.backends.emulated``;
* ``ideal``: the ideal network (no fabric, no root), ``testbed.backends.ideal``;
* ``ns3``: the ns-3 twin (a packet-level simulated fabric, no root), ``testbed.backends.ns3``.

``get(name)`` returns one; a new backend adds its name and loader here.
"""

from __future__ import annotations

from typing import Callable

from common.errors import TestbedError
from testbed.backends.base import Backend

HOSTS_ENV = "TESTBED_HOSTS"  # a hosts file: the emulated fabric over those hosts (``run --hosts FILE`` sets it)


def _emulated() -> Backend:
    import os

    if os.environ.get(HOSTS_ENV):
        from testbed.backends.emulated.multihost import MultiHostBackend

        return MultiHostBackend(os.environ[HOSTS_ENV], os.environ.get("TESTBED_TUNNEL", "vxlan"))
    from testbed.backends.emulated.backend import EmulatedBackend

    return EmulatedBackend()


def _ideal() -> Backend:
    from testbed.backends.ideal import IdealBackend

    return IdealBackend()


def _ns3() -> Backend:
    from testbed.backends.ns3.backend import Ns3Backend

    return Ns3Backend()


_LOADERS: dict[str, Callable[[], Backend]] = {"emulated": _emulated, "ideal": _ideal, "ns3": _ns3}
NAMES = tuple(_LOADERS)
DEFAULT = "emulated"


def get(name: str) -> Backend:
    """The backend called ``name``."""
    if name not in _LOADERS:
        raise TestbedError(f"backend {name!r} is unknown: expected one of {', '.join(NAMES)}")
    return _LOADERS[name]()
