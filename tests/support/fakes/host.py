"""An in-memory machine for the teardown: namespaces, root-namespace links, OVS bridges and QoS rows, each ours
or someone else's, and the commands the teardown ran against it.

``install`` puts it under ``testbed.emulation.build`` and ``inventory`` (netlink, ovs-vsctl, ip -batch,
the namespace sweep), so ``build.teardown`` and ``fabricctl.down`` run unchanged without root."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from types import SimpleNamespace

from fabrics.datapath import ALIAS, LINK_GROUP


class _Link(dict):
    """A pyroute2 link message: ``msg["index"]`` and ``msg.get_attr("IFLA_...")``."""

    def get_attr(self, name: str):
        return self.get(name)


@dataclass
class FakeHost:
    netns: set[str] = field(default_factory=set)
    links: dict[str, dict] = field(default_factory=dict)  # name -> {"alias", "group", "twin"}
    bridges: dict[str, bool] = field(default_factory=dict)  # name -> carries our external id
    qos: dict[str, bool] = field(default_factory=dict)  # uuid -> carries our external id
    killed_in: list[list[str]] = field(default_factory=list)  # namespaces whose processes were killed
    commands: list[list[str]] = field(default_factory=list)

    def add_link(self, name: str, ours: bool, twin: str | None = None) -> None:
        """A device; ``twin``: the other end of its veth (deleting one deletes both)."""
        self.links[name] = {"alias": ALIAS if ours else None, "group": LINK_GROUP if ours else 0, "twin": twin}
        if twin is not None:
            self.links[twin] = {"alias": ALIAS if ours else None, "group": LINK_GROUP if ours else 0, "twin": name}

    # ----------------------------------------------------------- the commands
    def run(self, cmd, input=None, **kwargs) -> subprocess.CompletedProcess:
        self.commands.append(list(cmd))
        rc = 0
        if cmd[:1] == ["ovs-vsctl"]:
            words = [w for w in cmd[1:] if not w.startswith("--timeout")]
            if words[:1] == ["br-exists"]:
                rc = 0 if words[1] in self.bridges else 2
            i = 0
            while i < len(words):
                if words[i] == "del-br":
                    self.bridges.pop(words[i + 1], None)
                if words[i] == "destroy" and words[i + 1] == "qos":
                    self.qos.pop(words[i + 2], None)
                i += 1
        elif cmd[:3] == ["ip", "-force", "-batch"]:
            for line in (input or "").splitlines():
                if line.startswith("netns delete "):
                    self.netns.discard(line.split()[2])
        elif cmd[:4] == ["ip", "link", "del", "group"]:
            group = int(cmd[4])
            for name in [n for n, link in self.links.items() if link["group"] == group]:
                del self.links[name]
        return subprocess.CompletedProcess(cmd, rc, "", "")

    # ---------------------------------------------------------------- netlink
    def ipr(self):
        host = self
        names = list(self.links)  # indexes stay as they were when the socket opened

        def msg(name: str) -> _Link:
            link = host.links[name]
            twin = link.get("twin")
            return _Link(index=names.index(name) + 1, IFLA_IFNAME=name, IFLA_IFALIAS=link["alias"],
                         IFLA_GROUP=link["group"], IFLA_LINK=names.index(twin) + 1 if twin else None)

        class IPRoute:
            def get_links(self, *indexes):
                if indexes:
                    return [msg(names[i - 1]) for i in indexes if names[i - 1] in host.links]
                return [msg(n) for n in names if n in host.links]

            def link_lookup(self, ifname):
                return [names.index(ifname) + 1] if ifname in host.links else []

            def link(self, op, index):
                assert op == "del"
                name = names[index - 1]
                host.commands.append(["netlink", "del", name])
                twin = host.links.pop(name).get("twin")
                host.links.pop(twin, None)

            def close(self):
                pass

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

        return IPRoute()

    # ------------------------------------------------------------ the install
    def install(self, monkeypatch) -> "FakeHost":
        from testbed.emulation import build, inventory, netns

        monkeypatch.setattr(build, "subprocess", SimpleNamespace(run=self.run, Popen=None))
        monkeypatch.setattr(build, "IPRoute", self.ipr)
        monkeypatch.setattr(netns, "exists", lambda name: name in self.netns)
        monkeypatch.setattr(inventory, "kill_in_namespaces", lambda names: self.killed_in.append(list(names)) or [])
        monkeypatch.setattr(inventory, "our_bridges", lambda: [b for b, ours in self.bridges.items() if ours])
        monkeypatch.setattr(inventory, "our_qos", lambda: [q for q, ours in self.qos.items() if ours])
        return self
