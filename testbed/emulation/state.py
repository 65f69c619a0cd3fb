"""The running fabric's state: what ``up`` built and started, as saved in the state file.

``up`` writes it (``state.json`` in the state directory) at each step of the bring-up, so
``down``, ``clean``, ``status`` and the drivers find what exists even if ``up`` died half way.
The file's JSON shape is a contract: a state file written by an earlier version of this module
must still be read, and ``to_json`` writes the same bytes the dict it replaces wrote.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from common.paths import DEFAULT_STATE_DIR
from fabrics import Fabric, build_fabric

_LOSSY = {"enabled": False}  # the "pfc" entry of a fabric without PFC


def state_dir() -> Path:
    """Where the running fabric's files live (one fabric per machine): $TESTBED_STATE_DIR, else
    /run/zcube-testbed. As root it must be a directory only root can write to (checked by the
    verbs that read or write it: ``fabricctl``)."""
    return Path(os.environ.get("TESTBED_STATE_DIR", DEFAULT_STATE_DIR))


def state_file() -> Path:
    """The running fabric's ``FabricState``, as JSON."""
    return state_dir() / "state.json"


class StateFileError(ValueError):
    """A state file that is not a state: unparsable, or an entry of the wrong shape (the reason only,
    never the file's content)."""


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
    controller_start: int | None = None  # the controller's start time (/proc/PID/stat field 22): pid reuse shows
    controller_argv: list[str] | None = None  # its exact command line, checked before any signal
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
        """Read a state file; missing entries take the defaults the callers used to assume. A file that is
        not a state raises ``StateFileError`` with the reason (never a piece of the file)."""
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise StateFileError(f"not JSON ({exc.msg} at line {exc.lineno})") from None
        if not isinstance(doc, dict):
            raise StateFileError(f"a JSON {type(doc).__name__}, not an object")
        known = {k: doc[k] for k in _ORDER if k in doc}
        for key, kinds in _SHAPES.items():
            if key in known and not isinstance(known[key], kinds):
                raise StateFileError(f"entry {key!r} is a {type(known[key]).__name__}")
        if "created" in known:
            created = known["created"]
            for key in ("netns", "links", "ovs_bridges"):
                names = created.get(key, [])
                if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                    raise StateFileError(f"entry 'created.{key}' is not a list of names")
            if not isinstance(created.get("qos_uuid"), (str, type(None))):
                raise StateFileError("entry 'created.qos_uuid' is not a name")
            known["created"] = Created.from_dict(created)
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
          "state_dir", "pfc", "queue_limits", "ovs_restore", "controller_status", "failover", "controller_start",
          "controller_argv")
_LATE = ("ovs_restore", "controller_status", "failover", "controller_start", "controller_argv")
_INT = (int, type(None))
_SHAPES = {"fabric": dict, "config": dict, "controller_port": _INT, "controller_pid": _INT, "created": dict,
           "queues": list, "timings": dict, "warnings": list, "state_dir": str, "pfc": dict, "queue_limits": dict,
           "ovs_restore": (dict, type(None)), "controller_status": (dict, type(None)), "failover": (str, type(None)),
           "controller_start": _INT, "controller_argv": (list, type(None))}
