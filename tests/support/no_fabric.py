"""``no_fabric``: a fixture that makes the emulated fabric unreachable, for tests of code that must run without
one (the ideal and ns-3 backends, the run loop with fakes, the CLI's refusals).

Every entry of ``testbed.emulation.fabricctl`` that needs root, OVS or a running fabric raises AssertionError
naming the test instead. A test module uses it for every test with::

    from tests.support.no_fabric import no_fabric  # noqa: F401 (autouse: nothing here reaches the fabric)
"""

from __future__ import annotations

import pytest

# what needs root, Open vSwitch or a fabric that is up
UNREACHABLE = ("require_root", "require_ovs", "load_state", "up", "down", "read_queues")


@pytest.fixture(autouse=True)
def no_fabric(monkeypatch, request):
    """Each of ``UNREACHABLE`` raises AssertionError naming the test that reached it."""
    from testbed.emulation import fabricctl

    def never(*args, **kwargs):
        raise AssertionError(f"{request.node.nodeid} reached the emulated fabric")

    for name in UNREACHABLE:
        monkeypatch.setattr(fabricctl, name, never)
