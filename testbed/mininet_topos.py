"""The testbed's fabrics as Mininet topologies, for plain Mininet:

    sudo mn --custom testbed/mininet_topos.py --topo zcube,32,8 ...
    sudo mn --custom testbed/mininet_topos.py --topo roft,32 ...

The wiring is the fabric model's (``fabrics``): same switch names and
DPIDs, hosts ``gpu<i>`` with interfaces ``gpu<i>-p<p>`` carrying the plan's
MACs, switch interfaces ``<switch>-eth<n>`` where n is the model's OpenFlow
port number, so the controller's rules fit a Mininet-built fabric too.

Addresses: Mininet configures one IP per host, on its default interface
(lowest port), so each host gets port 1's address (10.1.x.y/16). Port 2's
address (10.2.x.y) and the testbed's cross-plane host routes and static
neighbours are not configured by plain Mininet; ``testbed up`` does those.

``mn`` runs this file with /usr/bin/python3, which has none of the venv's
packages: only ``fabrics`` and ``common`` (its errors, and the state
directory's default from ``common.paths``) are imported, and they need the
standard library alone. ``mn`` executes the file with ``exec`` in a fresh namespace
(no ``__file__``), so the repository root is found from the code object's
file name; under ``import`` or ``runpy`` ``__file__`` is used. Every global
name here is copied into mn's own globals, hence the underscores.
"""

import os as _os
import sys as _sys

from mininet.topo import Topo as _Topo

_HERE = globals().get("__file__") or _sys._getframe(0).f_code.co_filename
_REPO = _os.path.dirname(_os.path.dirname(_os.path.abspath(_HERE)))
if _REPO not in _sys.path:
    _sys.path.insert(0, _REPO)

from common.errors import TestbedError as _TestbedError  # noqa: E402
from common.paths import DEFAULT_STATE_DIR as _DEFAULT_STATE_DIR  # noqa: E402
from fabrics import addressing as _addressing  # noqa: E402
from fabrics import build_fabric as _build_fabric  # noqa: E402


def _refuse_if_fabric_up():
    """mn deletes and re-creates bridges (sw1, leaf1, ...) and -eth interfaces of the same names
    as a running testbed fabric, and on any error it removes every OVS bridge: stop first.
    SystemExit, not an Exception, so mn does not run that clean-up."""
    state = _os.path.join(_os.environ.get("TESTBED_STATE_DIR", _DEFAULT_STATE_DIR), "state.json")
    if _os.path.exists(state):
        _sys.stderr.write(f"a testbed fabric is up ({state}): its bridges and interfaces have the same "
                          "names as this topology's; run 'testbed down' first\n")
        raise SystemExit(1)


def _fabric(kind, **kwargs):
    """The model; a bad size is one line on stderr and exit status 2 (not mn's traceback and clean-up)."""
    _refuse_if_fabric_up()
    try:
        return _build_fabric(kind, **kwargs)
    except _TestbedError as exc:
        _sys.stderr.write(f"--topo {kind}: {exc}\n")
        raise SystemExit(2) from None


class FabricTopo(_Topo):
    """A ``fabrics`` Fabric, switch by switch and cable by cable."""

    def build_from(self, fabric):
        self.fabric = fabric
        for name, sw in fabric.switches.items():
            self.addSwitch(name, dpid=f"{sw.dpid:016x}")
        for gpu in fabric.gpus():
            self.addHost(_addressing.host_name(gpu), ip=f"{_addressing.ip_of(gpu, 1)}/{_addressing.PREFIX_LEN}")
        for c in fabric.cables:
            if c.kind == "host":
                gpu = int(c.a[3:])
                self.addLink(c.a, c.b, port1=c.a_port, port2=c.b_port,
                             intfName1=_addressing.host_intf(gpu, c.a_port),
                             intfName2=_addressing.switch_intf(c.b, c.b_port),
                             addr1=_addressing.mac_of(gpu, c.a_port))
            else:
                self.addLink(c.a, c.b, port1=c.a_port, port2=c.b_port,
                             intfName1=_addressing.switch_intf(c.a, c.a_port),
                             intfName2=_addressing.switch_intf(c.b, c.b_port))


class ZCubeTopo(FabricTopo):
    """``--topo zcube,<gpus>,<gpus per switch>[,<parallel cables>]`` (default zcube,32,8)."""

    def build(self, gpus=32, gpus_per_switch=8, cables=None):
        self.build_from(_fabric("zcube", gpus=gpus, gpus_per_switch=gpus_per_switch, cables=cables))


class RoftTopo(FabricTopo):
    """``--topo roft,<gpus>[,<gpus per server>[,<radix>]]`` (default roft,32; radix as ``testbed``'s)."""

    def build(self, gpus=32, gpus_per_server=8, radix=None):
        self.build_from(_fabric("roft", gpus=gpus, gpus_per_server=gpus_per_server, radix=radix))


topos = {"zcube": ZCubeTopo, "roft": RoftTopo}
