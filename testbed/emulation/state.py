"""The running fabric's state: what ``up`` built and started, as saved in the state file.

``up`` writes it (``state.json`` in the state directory) at each step of the bring-up, so
``down``, ``clean``, ``status`` and the drivers find what exists even if ``up`` died half way.
The file's JSON shape is a contract: a state file written by an earlier version of this module
must still be read, and ``to_json`` writes the same bytes the dict it replaces wrote.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from testbed.fabric import Fabric, build_fabric

_LOSSY = {"enabled": False}  # the "pfc" entry of a fabric without PFC


@dataclass
class Created:
    """What this run made, for exact teardown."""

    netns: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)  # root-namespace devices (one end per veth suffices)
    ovs_bridges: list[str] = field(default_factory=list)
    qos_uuid: str | None = None

    def as_dict(self) -> dict:
        """As the state file has it (the lists themselves, not copies)."""
        return {"netns": self.netns, "links": self.links, "ovs_bridges": self.ovs_bridges, "qos_uuid": self.qos_uuid}

    @classmethod
    def from_dict(cls, d: dict) -> "Created":
        """From the state file's "created" entry."""
        return cls(d.get("netns", []), d.get("links", []), d.get("ovs_bridges", []), d.get("qos_uuid"))


@dataclass
class FabricState:
    """One fabric brought up by ``testbed up``: its model, datapath, processes and timings.

    Entries that ``up`` records only once it reached them (``ovs_restore``, ``controller_status``)
    are None until then, and absent from the file, as before."""

    fabric: dict = field(default_factory=dict)  # {"kind": ..., **build_fabric keyword arguments}
    config: dict = field(default_factory=dict)  # the DatapathConfig, as a dict
    controller_port: int | None = None
    controller_pid: int | None = None
    created: Created = field(default_factory=Created)  # what exists, for exact teardown
    queues: list[dict] = field(default_factory=list)  # the datapath plan's queues, as dicts
    timings: dict = field(default_factory=dict)  # bring-up phases, seconds
    warnings: list[str] = field(default_factory=list)
    state_dir: str = ""
    pfc: dict = field(default_factory=lambda: dict(_LOSSY))  # the PfcConfig, as a dict
    queue_limits: dict[str, int] = field(default_factory=dict)  # switch queue -> byte limit (PFC on)
    ovs_restore: dict | None = None  # OVS settings to give back on the way down
    controller_status: dict | None = None  # the controller's view once it was ready
    failover: str | None = None  # "controller": repair by the controller only; None: fast failover
    extra: dict = field(default_factory=dict)  # entries of the file this version does not know

    @property
    def pfc_enabled(self) -> bool:
        """Whether this fabric runs the pause daemon (and has the queue-watch maps pinned)."""
        return bool(self.pfc.get("enabled"))

    @property
    def directory(self) -> Path:
        """The state directory: controller config, log and status files live there."""
        return Path(self.state_dir)

    def model(self) -> Fabric:
        """The fabric model this state was built from."""
        return build_fabric(**self.fabric)

    # ------------------------------------------------------------- the file
    @classmethod
    def from_json(cls, text: str) -> "FabricState":
        """Read a state file; missing entries take the defaults the callers used to assume."""
        doc = json.loads(text)
        known = {k: doc[k] for k in _ORDER if k in doc}
        if "created" in known:
            known["created"] = Created.from_dict(known["created"])
        return cls(**known, extra={k: v for k, v in doc.items() if k not in _ORDER})

    def to_json(self) -> str:
        """The state file's text (byte for byte what the dict it replaces was saved as)."""
        return json.dumps(self.as_dict(), indent=1)

    def as_dict(self) -> dict:
        """The state as the JSON document: entries in the file's order, unrecorded ones left out."""
        doc = {}
        for key in _ORDER:
            value = getattr(self, key)
            if key in _LATE and value is None:
                continue
            doc[key] = value.as_dict() if key == "created" else value
        return doc | self.extra


# Entries in the order the file has them; the _LATE ones appear only once recorded (or when set).
_ORDER = ("fabric", "config", "controller_port", "controller_pid", "created", "queues", "timings", "warnings",
          "state_dir", "pfc", "queue_limits", "ovs_restore", "controller_status", "failover")
_LATE = ("ovs_restore", "controller_status", "failover")
