"""The hosts file: which machines one fabric runs on, and how to reach them over SSH.

    hosts:
      - name: ph1                 # the first host runs the controller and the run's coordinator
        address: 10.250.0.1       # SSH address, also the underlay address tunnels and switches use
        user: root
        key: /run/tb-pseudo/id_ed25519
        known_hosts: /run/tb-pseudo/known_hosts   # optional: default ~/.ssh/known_hosts
      - name: ph2
        ...

Optional per host: ``port`` (22), ``known_hosts``, ``project`` (where this project is checked out
there; default: the same path as here) and ``python`` (default ``<project>/.venv/bin/python``).
Relative paths are relative to the hosts file. Unknown keys are refused (a typo must not be
ignored), and so are two hosts with one name or one address.

Every mistake is one line naming the file, the host and the key: ``load`` raises ``TestbedError``.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from common.errors import TestbedError

NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,15}$")
HOSTNAME_RE = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                         r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")
MAX_HOSTS = 64


class Host(BaseModel):
    """One machine of the fabric."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="short name: a letter, then letters, digits, '-' or '_' (16 at most)")
    address: str = Field(description="SSH address; also the underlay address (IPv4 or a DNS name)")
    user: str = Field(min_length=1)
    key: str = Field(min_length=1, description="private key file for SSH")
    port: int = Field(22, ge=1, le=65535)
    known_hosts: str | None = None
    project: str | None = None
    python: str | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME_RE.match(v):
            raise ValueError(f"{v!r} is not a host name: a letter, then letters, digits, '-' or '_' (16 at most)")
        return v

    @field_validator("address")
    @classmethod
    def _address(cls, v: str) -> str:
        try:
            ip = ipaddress.ip_address(v)
        except ValueError:
            if not HOSTNAME_RE.match(v) or all(part.isdigit() for part in v.split(".")):
                raise ValueError(f"{v!r} is neither an IP address nor a DNS name") from None
            return v
        if ip.is_unspecified or ip.is_multicast:
            raise ValueError(f"{v} cannot be a host's address")
        if ip.version != 4:
            raise ValueError(f"{v}: only IPv4 underlays are supported (the tunnels are IPv4 gretap)")
        return v

    def project_dir(self, local_project: str) -> str:
        """Where the project is on this host (default: the same path as on the machine reading the file)."""
        return self.project or local_project

    def python_path(self, local_project: str) -> str:
        return self.python or f"{self.project_dir(local_project)}/.venv/bin/python"


class HostsFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    hosts: list[Host] = Field(min_length=1, max_length=MAX_HOSTS)


class Hosts:
    """A checked hosts file: the hosts in order (the first runs the controller and coordinator)."""

    def __init__(self, path: Path, hosts: list[Host]) -> None:
        self.path, self.hosts = path, hosts

    @property
    def names(self) -> list[str]:
        return [h.name for h in self.hosts]

    @property
    def first(self) -> Host:
        return self.hosts[0]

    def __getitem__(self, name: str) -> Host:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    def __len__(self) -> int:
        return len(self.hosts)


def load(path: str | Path) -> Hosts:
    """Read and check a hosts file; raise ``TestbedError`` with one line on any mistake."""
    import yaml

    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise TestbedError(f"hosts file {p}: {exc.strerror or exc}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise TestbedError(f"hosts file {p}: not valid YAML{where}") from None
    return parse(doc, p)


def parse(doc, path: Path) -> Hosts:
    """Check a parsed hosts document (``path`` names it in errors and anchors relative paths)."""
    if not isinstance(doc, dict):
        raise TestbedError(f"hosts file {path}: expected a mapping with a 'hosts' list")
    try:
        checked = HostsFile.model_validate(doc)
    except ValidationError as exc:
        raise TestbedError(f"hosts file {path}: {_first_error(exc, doc)}") from None
    hosts = [_anchored(h, path.parent) for h in checked.hosts]
    seen: dict[tuple, str] = {}
    for h in hosts:
        for what, key in (("name", h.name), ("address", (h.address, h.port))):
            other = seen.get((what, key))
            if other is not None:
                shown = h.name if what == "name" else h.address
                raise TestbedError(f"hosts file {path}: host {h.name}: {what} {shown} is also host {other}'s")
            seen[(what, key)] = h.name
    return Hosts(path, hosts)


def _anchored(h: Host, base: Path) -> Host:
    """Relative key / known_hosts paths, relative to the hosts file's folder."""
    fix = {}
    for key in ("key", "known_hosts"):
        value = getattr(h, key)
        if value and not value.startswith(("/", "~")):
            fix[key] = str(base / value)
    return h.model_copy(update=fix) if fix else h


def _first_error(exc: ValidationError, doc: dict) -> str:
    """pydantic's first error as 'host 2 (ph2): key: what is wrong'."""
    errors = exc.errors()
    # an unknown key first: a misspelt key also shows up as the real one missing
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = list(err["loc"])
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg = f"unknown key (expected {', '.join(Host.model_fields) if len(loc) > 2 else 'hosts'})"
    elif err["type"] == "missing":
        msg = "missing"
    if loc[:1] == ["hosts"] and len(loc) >= 2 and isinstance(loc[1], int):
        i = loc[1]
        entry = doc.get("hosts", [])[i] if isinstance(doc.get("hosts"), list) else None
        name = entry.get("name") if isinstance(entry, dict) else None
        who = f"host {i + 1}" + (f" ({name})" if isinstance(name, str) and name else "")
        key = ".".join(str(x) for x in loc[2:])
        return f"{who}: {key}: {msg}" if key else f"{who}: {msg}"
    return f"{'.'.join(str(x) for x in loc) or 'hosts'}: {msg}"


def dump(hosts: list[dict]) -> str:
    """A hosts file's text for ``hosts`` (dicts with Host's keys), with a comment saying who runs what."""
    import yaml

    for h in hosts:
        Host.model_validate(h)
    head = "# first host: controller and coordinator\n"
    return head + yaml.safe_dump({"hosts": hosts}, sort_keys=False)
