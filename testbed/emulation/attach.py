"""Mininet's CLI attached to the running fabric (``testbed cli``).

The fabric is not built by Mininet: GPUs are network namespaces ``tb-gpu<i>``
and switches are OVS bridges made by ``testbed up``. This module wraps what
exists in Mininet's node classes so Mininet's own CLI works on it (``nodes``,
``net``, ``intfs``, ``dump``, ``<node> <cmd>``, ``py``, ``sh``, ``dpctl``,
``pingall``, ...) and changes nothing of the fabric:

* ``NetnsHost``: a Mininet Host whose shell runs inside the GPU's existing
  namespace. Mininet starts a node's shell as ``mnexec -cd[n] ... bash``
  (``Node.startShell``) and later commands of ``popen``/``pexec`` attach to
  that shell's namespaces (``mnexec -a <shell pid>``), so only the shell's
  own spawn needs changing: ``_popen`` prefixes it with ``ip netns exec``.
  ``inNamespace`` is False because Mininet must neither make a new namespace
  (mnexec ``-n``) nor move interfaces into one.
* ``AttachedOVSSwitch``: an OVSSwitch with a shell in the root namespace;
  ``start``/``stop`` never add or delete the bridge (only the shell is
  stopped), and ``dpctl`` speaks OpenFlow 1.3 as the bridges do.
  (Mininet's Switch registers the root ``lo`` as its control interface,
  which runs ``ifconfig lo up``; a no-op on a running machine.)
* ``ExistingIntf``: registered under its real name and OpenFlow/NIC port
  number, with the plan's address, never configured or deleted.
* ``Cable``: a model cable between two such interfaces (Mininet's Link would
  create a veth pair), so ``net`` shows the wiring.
* ``AttachedNet``: the Mininet network object the CLI talks to. Mininet's
  ``__init__`` is not run (it raises system limits and sysctls, and builds);
  its lookups, ``ping*``, ``iperf`` and ``configLinkStatus`` are inherited.
  ``start``/``build`` do nothing, ``stop`` only stops the shells started here.

Leaving the CLI stops those shells (and what runs in them) and nothing else.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from mininet.cli import CLI
from mininet.link import Intf
from mininet.log import lg
from mininet.net import Mininet
from mininet.node import Host, OVSSwitch

from common.errors import TestbedError
from fabrics import Fabric, addressing
from fabrics.datapath import plan_datapath
from testbed.emulation import fabricctl, netns


# ------------------------------------------------------------ the mapping
@dataclass(frozen=True)
class IntfSpec:
    name: str
    port: int  # NIC port (1, 2) on a GPU, OpenFlow port on a switch
    ip: str | None = None  # "10.1.0.3/16"
    mac: str | None = None


@dataclass(frozen=True)
class NodeSpec:
    name: str
    intfs: tuple[IntfSpec, ...]
    netns: str | None = None  # GPUs: their namespace; switches live in the root namespace
    dpid: str | None = None  # switches: 16 hex digits


@dataclass(frozen=True)
class AttachSpec:
    hosts: tuple[NodeSpec, ...]
    switches: tuple[NodeSpec, ...]
    cables: tuple[tuple[str, str, str, str], ...]  # (node, intf, node, intf), one per model cable


def attach_spec(fabric: Fabric) -> AttachSpec:
    """What ``testbed up`` made for ``fabric``, by name: namespaces, interfaces, bridges and ports."""
    plan = plan_datapath(fabric)
    hosts = tuple(
        NodeSpec(addressing.host_name(h.gpu),
                 tuple(IntfSpec(h.nics[p], p, f"{h.addresses[p]}/{addressing.PREFIX_LEN}",
                                addressing.mac_of(h.gpu, p)) for p in sorted(h.nics)),
                 netns=h.netns)
        for h in plan.hosts)
    switches = tuple(
        NodeSpec(name, tuple(IntfSpec(dev, of_port) for dev, _, of_port in sorted(ports, key=lambda p: p[2])),
                 dpid=f"{fabric.switches[name].dpid:016x}")
        for name, ports in plan.ovs_ports.items())

    def end(node: str, port: int) -> tuple[str, str]:
        if node.startswith("gpu"):
            return node, addressing.host_intf(int(node[3:]), port)
        return node, addressing.switch_intf(node, port)

    cables = tuple((*end(c.a, c.a_port), *end(c.b, c.b_port)) for c in fabric.cables)
    return AttachSpec(hosts, switches, cables)


def check_running(spec: AttachSpec, bridges: set[str] | None = None) -> None:
    """TestbedError unless every namespace (and, given the bridge list, every bridge) exists:
    a shell started for a missing namespace would never print its prompt."""
    gone = [h.netns for h in spec.hosts if not netns.exists(h.netns)]
    if bridges is not None:
        gone += [f"bridge {s.name}" for s in spec.switches if s.name not in bridges]
    if gone:
        raise TestbedError(f"the fabric recorded in {fabricctl.state_file()} is not running ({gone[0]} is "
                           f"missing{f' and {len(gone) - 1} more' if len(gone) > 1 else ''}): "
                           "run 'testbed clean', then 'testbed up'")


# ---------------------------------------------------------- Mininet nodes
class ExistingIntf(Intf):
    """An interface that exists already: known by its real name, never configured or deleted here."""

    def config(self, ip=None, **_params):
        if ip:
            self.ip, self.prefixLen = ip.split("/")
        return {}

    def delete(self):
        self.node.delIntf(self)
        self.link = None


class Cable:
    """A model cable between two registered interfaces (what ``net`` and ``links`` show)."""

    def __init__(self, intf1: Intf, intf2: Intf) -> None:
        self.intf1, self.intf2 = intf1, intf2
        intf1.link = intf2.link = self

    def status(self) -> str:
        return f"({self.intf1.status()} {self.intf2.status()})"

    def __str__(self) -> str:
        return f"{self.intf1}<->{self.intf2}"


class NetnsHost(Host):
    """A GPU of the running fabric: a Mininet host whose shell is in the namespace ``netns``."""

    def __init__(self, name: str, netns: str, **params) -> None:
        self.netns = netns
        super().__init__(name, inNamespace=False, **params)

    def _popen(self, cmd, **params):
        if self.shell is None:  # Node.startShell spawning this node's shell
            cmd = ["ip", "netns", "exec", self.netns, *cmd]
        return super()._popen(cmd, **params)


class AttachedOVSSwitch(OVSSwitch):
    """A bridge of the running fabric. Commands run in a root-namespace shell; the bridge is
    never created, reconfigured or deleted here (``testbed down`` does that)."""

    def __init__(self, name: str, dpid: str, **params) -> None:
        super().__init__(name, dpid=dpid, protocols="OpenFlow13", datapath="user", inNamespace=False, **params)

    def start(self, controllers):
        pass

    def stop(self, deleteIntfs=False):
        self.terminate()  # our shell only

    @classmethod
    def batchStartup(cls, switches, run=None):
        return switches

    @classmethod
    def batchShutdown(cls, switches, run=None):
        for switch in switches:
            switch.terminate()
        return switches

    def attach(self, intf):
        raise TestbedError(f"{self.name} belongs to the running fabric: its ports are not changed from the CLI")

    detach = attach

    def dpctl(self, *args):
        """ovs-ofctl on this bridge, in OpenFlow 1.3 (the bridges accept nothing older)."""
        return self.cmd("ovs-ofctl", "-O", self.protocols, args[0], self, *args[1:])


class AttachedNet(Mininet):
    """The running fabric as Mininet's network object (see the module docstring)."""

    def __init__(self, hosts: list[Host], switches: list[OVSSwitch], links: list[Cable]) -> None:
        # deliberately not Mininet.__init__: that runs fixLimits() (sysctls) and would build
        self.topo = None
        self.hosts, self.switches, self.controllers, self.links = list(hosts), list(switches), [], list(links)
        self.nameToNode = {n.name: n for n in self.hosts + self.switches}
        self.terms = []
        self.built = True
        self.waitConn = False

    def build(self):
        pass

    def start(self):
        pass

    def stop(self):
        """Stop the shells started for this CLI; the fabric stays up."""
        for node in self.hosts + self.switches:
            node.terminate()


def attach(spec: AttachSpec) -> AttachedNet:
    """Start one shell per GPU (in its namespace) and per switch; on any failure stop those started."""
    started: list = []
    try:
        intfs: dict[tuple[str, str], Intf] = {}
        for h in spec.hosts:
            node = NetnsHost(h.name, h.netns)
            started.append(node)
            for i in h.intfs:
                intfs[h.name, i.name] = ExistingIntf(i.name, node=node, port=i.port, mac=i.mac, ip=i.ip)
        for s in spec.switches:
            node = AttachedOVSSwitch(s.name, s.dpid)
            started.append(node)
            for i in s.intfs:
                intfs[s.name, i.name] = ExistingIntf(i.name, node=node, port=i.port)
        links = [Cable(intfs[a, ai], intfs[b, bi]) for a, ai, b, bi in spec.cables]
    except BaseException:
        for node in started:
            node.terminate()
        raise
    n = len(spec.hosts)
    return AttachedNet(started[:n], started[n:], links)


@contextlib.contextmanager
def attached(spec: AttachSpec):
    net = attach(spec)
    try:
        yield net
    finally:
        net.stop()


# -------------------------------------------------------------- the verb
class _ErrorCount(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.count = 0

    def emit(self, record) -> None:
        self.count += 1


def _bridges() -> set[str]:
    proc = subprocess.run(["ovs-vsctl", "--timeout=5", "list-br"], capture_output=True, text=True)
    return set(proc.stdout.split())


def run_cli(commands: list[str] | None = None) -> int:
    """``testbed cli``: Mininet's CLI on the running fabric, or ``commands`` run through it (``drive``)."""
    st = fabricctl.require_state()
    spec = attach_spec(fabricctl.fabric_of_state(st))
    check_running(spec)
    fabricctl.require_root()
    fabricctl.require_ovs()
    check_running(spec, _bridges())
    with attached(spec) as net:
        return drive(net, commands)


def drive(net: Mininet, commands: list[str] | None = None) -> int:
    """Mininet's CLI on ``net``, interactive; with ``commands``, those lines in order, then return.
    Status 1 if the CLI reported an error (an unknown command or node, ...); a node command's own
    exit status is not seen by Mininet's CLI."""
    old_stream, old_level, errors = lg.ch.stream, lg.level, _ErrorCount()
    lg.ch.setStream(sys.stdout)  # Mininet logs to stderr; what the CLI prints belongs on stdout
    lg.setLogLevel("output" if commands else "info")
    lg.addHandler(errors)
    try:
        if not commands:
            CLI(net)
            return 0
        r, w = os.pipe()  # an stdin that never becomes readable: nothing is typed into the commands
        with os.fdopen(r) as stdin, os.fdopen(w, "w"), tempfile.NamedTemporaryFile(
                "w", prefix="testbed-cli-", suffix=".txt") as script:
            script.write("".join(c.rstrip("\n") + "\n" for c in commands))
            script.flush()
            CLI(net, stdin=stdin, script=script.name)
        return 1 if errors.count else 0
    finally:
        lg.removeHandler(errors)
        lg.setLevel(old_level)
        lg.ch.setLevel(old_level)
        lg.ch.setStream(old_stream)
