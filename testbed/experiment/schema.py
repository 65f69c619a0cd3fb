"""The experiment file: one YAML document saying what ``testbed run`` compares.

An experiment costs minutes of emulator time per fabric, so everything is
checked before anything is built: pydantic for keys, types and ranges (unknown
keys are errors, not silently ignored), then the rules of the modules that
will consume the values (``DatapathConfig.validate``, the fabric builders,
``traffic.model.placement``, the backend). Every problem becomes one line
``FILE: key.path: rule (got value)`` as a ``TestbedError`` whose ``key`` is that key path.

The sections (link, pfc, trace, serving, faults) are defined with the repetition that takes them
(``testbed.repetition.settings``); the experiment adds the fabrics, the repetitions and the run's
own keys.

The schema holds every key's default (one place; ``experiments/kv-replay.yaml``
spells them out and a unit test keeps the two equal). ``testbed run`` with no
arguments runs ``experiments/default.yaml``, the calibrated live experiment.
``experiments/schema.json`` is generated from this module (``python -m
testbed.experiment.schema``), also checked by a unit test.
"""

import copy
import functools
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional, Union

import yaml
from pydantic import BaseModel, Field, ValidationError, ValidationInfo, field_validator

from common.errors import TestbedError
from common.paths import REPO
from testbed import backends
from testbed.experiment import experiment_file
from testbed.repetition.settings import (
    TRACE_SOURCES,
    BackendName,
    FabricName,
    Fault,
    Link,
    Pfc,
    Serving,
    Trace,
    Twin,
    _Section,
)
from traffic.model import models, placement

EXAMPLES_DIR = REPO / "experiments"
SCHEMA_PATH = EXAMPLES_DIR / "schema.json"
DEFAULT_EXPERIMENT = EXAMPLES_DIR / "default.yaml"  # what `testbed run` runs with no arguments


def _existing_beside_experiment(v: str, info: ValidationInfo, expected: str) -> Path:
    """A file named in the experiment file (relative to its folder) that must exist."""
    p = Path(v).expanduser()
    p = p if p.is_absolute() else Path((info.context or {}).get("base") or Path.cwd()) / p
    if not p.is_file():
        raise ValueError(f"{p} does not exist: {expected}")
    return p


def _shipped_json(v: str, info: ValidationInfo, expected: str, fields: dict[str, type], lacks: str) -> str:
    """A JSON document a verb wrote, named in the experiment file: it exists, reads as JSON and holds
    ``fields`` (name -> type; ``lacks`` names them in the error); its absolute path."""
    p = _existing_beside_experiment(v, info, expected)
    try:
        doc = json.loads(p.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{p} cannot be read as JSON ({type(exc).__name__}): {expected}") from None
    if not isinstance(doc, dict) or not all(isinstance(doc.get(k), t) for k, t in fields.items()):
        raise ValueError(f"{p} has no {lacks}: {expected}")
    return os.path.normpath(os.path.abspath(p))


# keys an alternative of `testbed sensitivity` may not set: every alternative runs every fabric, the same
# repetitions on the same backend into its own folder, and is not itself a sensitivity
NOT_ALTERNATIVE_KEYS = ("name", "fabrics", "repetitions", "backend", "sensitivity", "sensitivity_result",
                        "scale_result", "crosscheck_result", "sweep", "sweep_paired")


class Alternative(_Section):
    """One alternative of ``testbed sensitivity`` (testbed.experiment.sensitivity): the experiment with a few keys
    set otherwise, as ``--set KEY=VALUE`` would set them."""

    name: str = Field(..., pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", description="its folder and its row")
    assumption: Optional[str] = Field(None, description="the assumption it varies, for the report's sentence "
                                                        "(e.g. 'port policy'); null: the name")
    set: dict[str, Any] = Field(
        ..., min_length=1, description="key path -> value, e.g. {serving.policy: pair-hash}; values are checked "
                                       "as --set's are (by `testbed sensitivity`, before anything runs)")

    @field_validator("set")
    @classmethod
    def _key_paths(cls, v: dict, info: ValidationInfo) -> dict:
        label = f"alternative {info.data.get('name')!r}" if info.data.get("name") else "an alternative"
        for key in v:
            try:
                check_key_path(key, label)
            except TestbedError as exc:
                raise ValueError(str(exc)) from None
            if key.split(".")[0] in NOT_ALTERNATIVE_KEYS:
                raise ValueError(f"{key} (from {label}): cannot be set by an alternative (every alternative runs "
                                 "every fabric, the same repetitions on the same backend)")
            if not (v[key] is None or isinstance(v[key], (str, int, float, bool))):
                raise ValueError(f"{key} (from {label}): expected one value, as --set {key}=VALUE takes "
                                 f"(got a {type(v[key]).__name__})")
        return v


class Experiment(_Section):
    """One `testbed run`: the same traffic on every fabric, repeated with seeds seed, seed+1, ..."""

    name: Optional[str] = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
                                description="run-id suffix; null: the experiment file's stem, or 'default'")
    fabrics: list[FabricName] = Field(["zcube", "roft"], min_length=1, description="run one after the other")
    backend: BackendName = Field(backends.DEFAULT, description="what carries the messages: emulated (the "
                                 "emulated fabric: Open vSwitch, namespaces, real TCP; root), ideal (every "
                                 "message as fast as its sender's NICs allow; no fabric, no root) or ns3 (the "
                                 "ns-3 twin: a packet-level simulated fabric; no root)")
    gpus: int = Field(32, ge=2)
    gpus_per_switch: Union[int, Literal["auto"]] = Field(
        8, description="ZCube k (>= 1); auto: the smallest power of two with k^2 >= 2 x gpus, or with k^2 >= "
                       "gpus when 2k ports would not fit a 51.2T switch's 256 (the scale study's rule: 8 at 32 "
                       "GPUs, 32 at 512, 128 at 8,192 and 16,384; ROFT's default radix follows it)")
    cables: Optional[int] = Field(None, ge=1, description="ZCube parallel cables per odd-even pair; null: k^2/n")
    gpus_per_server: int = Field(8, ge=1, description="ROFT server size")
    radix: Optional[int] = Field(None, ge=2, description="ROFT switch radix; null: the ZCube's")
    link: Link = Field(default_factory=Link)
    pfc: Pfc = Field(default_factory=Pfc)
    trace: Trace = Field(default_factory=Trace)
    serving: Serving = Field(default_factory=Serving)
    twin: Twin = Field(default_factory=Twin)
    hosts: Optional[str] = Field(None, description="a hosts file (docs/multihost.md): the emulated fabric spread "
                                 "over those machines (relative to the experiment file's folder; on the command "
                                 "line, `run --hosts FILE`, to the current one); null: this machine")
    seed: int = Field(0, ge=0, description="repetition r uses seed + r - 1 (scheduler, expert routing, cross traffic, "
                                           "and the ECMP hash outcome unless hash_seed is set)")
    hash_seed: Optional[int] = Field(None, ge=0, description="repetition r draws its ECMP hash outcome (its "
                                     "connections' source ports) from hash_seed + r - 1 instead of its seed: a "
                                     "fresh outcome with the same expert routing; null: the repetition's seed")
    paths_from: Optional[str] = Field(None, description="an emulator run directory (`testbed run`'s, relative to the "
                                      "current directory): repetition r on each fabric carries every connection on "
                                      "the ports and paths Open vSwitch gave it there (runs/<fabric>/rep<r>/"
                                      "ecmp.json) instead of the model's ECMP hash; for the backends that route "
                                      "by themselves (ns3, fluid); null: the model's hash")
    repetitions: int = Field(1, ge=1, le=100)
    jobs: Union[int, Literal["auto"]] = Field(
        "auto", description="repetitions carried at once, each in a forked process of its own, on the backends "
                            "that compute (ideal, fluid): auto = the CPUs this process may use, at most the "
                            "repetitions; the emulated backend (a live fabric needs the machine to itself) and the "
                            "ns-3 twin (its bindings do not survive a fork) carry one at a time")
    cross_flows: int = Field(0, ge=0, description="background iperf3 flows between random GPU pairs")
    sweep: Optional[dict[str, list[Union[str, int, float]]]] = Field(
        None, description="the grid `testbed sweep FILE` runs when given no --param: {key: [values]}, one or two "
                          "keys; `run` ignores it")
    sweep_paired: bool = Field(False, description="the sweep's two keys go together: point i takes the i-th value "
                                                  "of each (lists of one length), not every combination")
    calibration: Optional[str] = Field(None, description="calibration.json written by `testbed calibrate` that "
                                                         "this experiment's load was chosen from (relative to the "
                                                         "experiment file's folder); the report shows it first")
    faults: list[Fault] = Field([], description="failures injected while each replay runs: cables, switches, "
                                                "the controller (testbed.backends.emulated.faults)")
    load_curve: Optional[str] = Field(None, description="load_curve.json written by `testbed sweep` over one key "
                                                        "(relative to the experiment file's folder); the report "
                                                        "shows it after the headline, marking this run's level")
    sensitivity: list[Alternative] = Field([], description="the alternatives `testbed sensitivity` runs besides "
                                           "the experiment as given (each a few keys set otherwise); `run` "
                                           "ignores them")
    scale_result: Optional[str] = Field(None, description="a shipped run of this workload at the seed's scale "
                                        "(scale_result.json, from `python -m testbed.report.scale_result RUN_DIR "
                                        "OUT`; relative to the experiment file's folder): the headline shows it "
                                        "beside the run's")
    scale_live: Literal["auto", "always", "never"] = Field(
        "auto", description="with a scale_result, `run` computes that result's experiment again on the fluid "
                            "backend after its own repetitions (at least 5 a fabric) and shows it instead: auto for "
                            "the experiment as written on the emulated backend when the estimate fits the main "
                            "job's 15 minutes, always, or never (the shipped file)")
    crosscheck_result: Optional[str] = Field(None, description="crosscheck.json written by `testbed crosscheck` on "
                                             "this experiment (relative to the experiment file's folder): the "
                                             "headline says whether the two engines agreed, the report shows it")
    sensitivity_result: Optional[str] = Field(None, description="sensitivity.json written by `testbed sensitivity` "
                                                                "(relative to the experiment file's folder); the "
                                                                "report shows it after the headline")

    @field_validator("hosts")
    @classmethod
    def _hosts_file(cls, v: Optional[str], info: ValidationInfo) -> Optional[str]:
        if v is None:
            return None
        from testbed.emulation.hosts import hostsfile

        p = _existing_beside_experiment(v, info, "expected a hosts file (docs/multihost.md)")
        try:
            hostsfile.load(p)  # a bad file is one line before anything is built
        except TestbedError as exc:
            raise ValueError(str(exc)) from None
        return os.path.normpath(os.path.abspath(p))

    @field_validator("calibration")
    @classmethod
    def _calibration_file(cls, v: Optional[str], info: ValidationInfo) -> Optional[str]:
        if v is None:
            return None
        p = _existing_beside_experiment(v, info, "expected a calibration.json written by `testbed calibrate`")
        return os.path.normpath(os.path.abspath(p))

    @field_validator("load_curve")
    @classmethod
    def _load_curve_file(cls, v: Optional[str], info: ValidationInfo) -> Optional[str]:
        if v is None:
            return None
        return _shipped_json(v, info, "expected a load_curve.json written by `testbed sweep` over one key",
                             {"knob": str, "fabrics": dict}, "knob and fabrics")

    @field_validator("crosscheck_result")
    @classmethod
    def _crosscheck_file(cls, v: Optional[str], info: ValidationInfo) -> Optional[str]:
        if v is None:
            return None
        return _shipped_json(v, info, "expected a crosscheck.json written by `testbed crosscheck`",
                             {"repetitions": list, "agreement": dict}, "repetitions and agreement")

    @field_validator("scale_result")
    @classmethod
    def _scale_file(cls, v: Optional[str], info: ValidationInfo) -> Optional[str]:
        if v is None:
            return None
        return _shipped_json(v, info, "expected a scale_result.json written by python -m testbed.report.scale_result "
                             "RUN_DIR OUT.json", {"headline": dict}, "headline")

    @field_validator("sensitivity_result")
    @classmethod
    def _sensitivity_file(cls, v: Optional[str], info: ValidationInfo) -> Optional[str]:
        if v is None:
            return None
        return _shipped_json(v, info, "expected a sensitivity.json written by `testbed sensitivity`",
                             {"baseline": dict, "alternatives": list}, "baseline and alternatives")

    @field_validator("sensitivity")
    @classmethod
    def _distinct_alternatives(cls, v: list) -> list:
        names = [a.name for a in v]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"alternative {name!r} is listed twice")
            if name == "baseline":
                raise ValueError("an alternative cannot be called 'baseline' (the experiment as given is)")
        return v

    @field_validator("gpus_per_switch")
    @classmethod
    def _k(cls, v, info: ValidationInfo):
        from fabrics.zcube import scaled_k

        if v == "auto":
            if "gpus" not in info.data:
                raise ValueError("auto needs a valid gpus")
            try:
                return scaled_k(info.data["gpus"])
            except TestbedError as exc:
                raise ValueError(str(exc)) from None
        if v < 1:
            raise ValueError("expected a whole number >= 1 or auto")
        return v

    @field_validator("fabrics")
    @classmethod
    def _distinct(cls, v: list[str]) -> list[str]:
        for kind in v:
            if v.count(kind) > 1:
                raise ValueError(f"{kind!r} is listed twice")
        return v


# --------------------------------------------------- mapping onto the runners
def fabric_spec(exp: Experiment, kind: str):
    """The fabric ``kind`` of this experiment as a repetition (and ``up``, ``bench``) takes it: its kind and
    size, the datapath's link settings (checked), PFC and the real link one link stands for."""
    from fabrics import fabric_args
    from fabrics.datapath import DatapathConfig
    from pfc.policy import PfcConfig
    from testbed.backends.base import FabricSpec

    link = exp.link
    datapath = DatapathConfig(rate_bps=link.rate, mtu=link.mtu, buffer_bytes=link.buffer_bytes,
                              nic_buffer_bytes=link.nic_buffer_bytes or 0, burst_bytes=link.burst_bytes).validate()
    return FabricSpec(fabric_args(kind, exp.gpus, exp.gpus_per_switch, exp.cables, exp.gpus_per_server, exp.radix),
                      datapath, PfcConfig.from_dict(exp.pfc.model_dump()), link.represents)


def repetition_spec(exp: Experiment, kind: str, rep: int = 1):
    """Repetition ``rep`` (1-based; seed + rep - 1) on fabric ``kind``: the one conversion of the experiment
    into what a repetition runs with (``testbed.repetition.spec.RepetitionSpec``)."""
    from testbed.repetition.spec import RepetitionSpec

    return RepetitionSpec(fabric=fabric_spec(exp, kind), trace=exp.trace, serving=exp.serving,
                          time_dilation=exp.link.time_dilation, seed=exp.seed + rep - 1, rep=rep,
                          cross_flows=exp.cross_flows, gpus_per_server=exp.gpus_per_server,
                          faults=fault_specs(exp, kind), backend=exp.backend, hosts=exp.hosts,
                          hash_seed=None if exp.hash_seed is None else exp.hash_seed + rep - 1,
                          paths_from=exp.paths_from, twin=exp.twin)


def fault_specs(exp: Experiment, kind: str) -> tuple:
    """The experiment's faults on fabric ``kind``, as the fault schedule takes them."""
    return tuple({"at": f.at, "duration": f.duration, "target": f.target_on(kind), "action": f.action}
                 for f in exp.faults if f.target_on(kind))


# -------------------------------------------------------------- overrides
@dataclass(frozen=True)
class Override:
    """One value set from outside the file: ``origin`` is the flag that set it (--speed, --param, --set)."""

    key: str
    value: Any
    origin: str

    def as_dict(self) -> dict:
        return {"key": self.key, "value": self.value, "origin": self.origin}


def section_at(parts: list[str]) -> type[BaseModel] | None:
    """The schema section a dotted key path leads to (None: a leaf value)."""
    model: type[BaseModel] | None = Experiment
    for part in parts:
        if model is None or part not in model.model_fields:
            return None
        ann = model.model_fields[part].annotation
        model = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
    return model


def check_key_path(key: str, origin: str) -> list[str]:
    """Split ``key`` (e.g. link.rate) and check it names a value of the schema."""
    parts = key.split(".")
    model: type[BaseModel] = Experiment
    for i, part in enumerate(parts):
        where = ".".join(parts[:i + 1])
        if part not in model.model_fields:
            raise TestbedError(f"{where} (from {origin}): unknown key (known: {', '.join(model.model_fields)})")
        sub = section_at(parts[:i + 1])
        if sub is None:
            if i != len(parts) - 1:
                raise TestbedError(f"{key} (from {origin}): {where} is a value, not a section")
            return parts
        model = sub
    raise TestbedError(f"{key} (from {origin}): is a section: expected one of its keys "
                       f"({', '.join(model.model_fields)})")


_SOURCE_KEYS = tuple(f"trace.{k}" for k in TRACE_SOURCES)

# Command-line values of these keys stay text: a bare rate means Mbit/s there (as with --rate), and a
# name or path is never a number.
CLI_TEXT_KEYS = ("link.rate", "trace.path", "name", "serving.model")


def cli_value(key: str, text: str) -> Any:
    """A --set / --param value: read as YAML would (2 -> int, 1.5 -> float, true -> bool, null -> None),
    except for CLI_TEXT_KEYS; anything that is not a scalar stays text."""
    if key in CLI_TEXT_KEYS:
        return text
    try:
        v = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return text if isinstance(v, (dict, list)) else v


def apply_overrides(raw: dict, overrides: list[Override]) -> dict:
    """A copy of ``raw`` with every override set at its key path (checked against the schema)."""
    out = copy.deepcopy(raw)
    for o in overrides:
        parts = check_key_path(o.key, o.origin)
        node = out
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        value = o.value
        if o.key == "trace.path" and isinstance(value, str) and not Path(value).expanduser().is_absolute():
            value = os.path.abspath(Path(value).expanduser())  # given on the command line: relative to cwd
        node[parts[-1]] = value
    return _one_source(out, overrides)


def _one_source(data: dict, overrides: list[Override]) -> dict:
    """Where the requests come from (``settings.TRACE_SOURCES``): a trace path or a workload the overrides set
    (the last value of each key; null sets nothing) replaces the other in ``data``; both set by the overrides
    is refused in one line naming both keys and where each was set."""
    last = {o.key: o for o in overrides if o.key in _SOURCE_KEYS}
    given = [last[k] for k in _SOURCE_KEYS if k in last and last[k].value is not None]
    if len(given) == 2:
        raise TestbedError(f"{given[0].key} (from {given[0].origin}) and {given[1].key} (from {given[1].origin}) "
                           "are alternatives (a trace file, or a named workload): expected one of them, not both "
                           f"(got {given[0].value!r} and {given[1].value!r})", key=given[0].key)
    trace = data.get("trace")
    if given and isinstance(trace, dict):
        for key in _SOURCE_KEYS:
            if key != given[0].key and trace.get(key.split(".")[1]) is not None:
                trace[key.split(".")[1]] = None  # replaced by the source the overrides set
    return data


# ----------------------------------------------------------------- errors
def _loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _show(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return json.dumps(v)
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (int, str)):
        return str(v) if isinstance(v, int) else repr(v)
    return type(v).__name__


def _rule(err: dict) -> str:
    kind, msg, ctx = err["type"], err["msg"], err.get("ctx") or {}
    loc = tuple(err["loc"])
    if kind == "extra_forbidden":
        parent = section_at([p for p in loc[:-1] if isinstance(p, str)])
        known = ", ".join(parent.model_fields) if parent else ""
        return f"unknown key (known: {known})"
    if kind == "missing":
        return "required"
    if kind == "model_type":
        sub = section_at([p for p in loc if isinstance(p, str)])
        keys = f" with keys {', '.join(sub.model_fields)}" if sub else ""
        return f"must be a mapping{keys} (got {_show(err.get('input'))})"
    ops = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}
    if kind in ops:
        bound = next(iter(ctx.values()))
        rule = f"must be {ops[kind]} {_show(bound)}"
    elif kind == "value_error":
        return msg.removeprefix("Value error, ")
    elif kind == "too_short":
        rule = f"must have at least {ctx.get('min_length')} item(s)"
    elif kind == "string_pattern_mismatch":
        rule = f"must match {ctx.get('pattern')}"
    else:
        rule = msg.replace("Input should be", "must be").replace("List should have", "must have")
    got = err.get("input")
    if isinstance(got, (bool, int, float, str)) or got is None:
        rule += f" (got {_show(got)})"
    return rule


def _one_line(label: str, exc: ValidationError, overrides: list[Override]) -> str:
    errors = exc.errors()
    first = errors[0]
    where = _loc(tuple(first["loc"]))
    origin = next((o.origin for o in reversed(overrides) if o.key == where), None)
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{label}: {where or '(top level)'}{f' (from {origin})' if origin else ''}: {_rule(first)}{more}"


# ------------------------------------------------- checks beyond the schema
# The rules of the code that consumes the values: its errors name the parameter they are about
# (TestbedError.key); each call below says which key path fed which parameter.
_LINK_KEYS = {"rate_bps": "link.rate", "mtu": "link.mtu", "burst_bytes": "link.burst_bytes",
              "buffer_bytes": "link.buffer_bytes", "nic_buffer_bytes": "link.nic_buffer_bytes"}
_FABRIC_KEYS = {"gpus": "gpus", "gpus_per_switch": "gpus_per_switch", "cables": "cables",
                "gpus_per_server": "gpus_per_server", "radix": "radix", "interface": "gpus"}
# PFC's own parameter names (pfc.policy's errors say "pfc xoff ...", "dynamic alpha", "poll_us") -> key paths
_PFC_KEYS = {"xoff_bytes": "pfc.xoff_bytes", "xon_bytes": "pfc.xon_bytes", "headroom_bytes": "pfc.headroom_bytes",
             "dynamic_alpha": "pfc.dynamic_alpha", "poll_us": "pfc.poll_us"}
_PLACEMENT_KEYS = {"n_gpus": "gpus", "prefill_tp": "serving.prefill_tp", "decode_tp": "serving.decode_tp",
                   "prefill_fraction": "serving.prefill_fraction", "gpus_per_server": "gpus_per_server"}


class _Problem(Exception):
    """A rule broken at a key path, found after the schema accepted the file."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(key, message)
        self.key, self.message = key, message


def _attempt(fn, keys: dict[str, str], default: str):
    """``fn()``; its TestbedError as a _Problem at the key path of the parameter it names (``default`` when it
    names none of ``keys``)."""
    try:
        return fn()
    except TestbedError as exc:
        raise _Problem(keys.get(exc.key, default), str(exc)) from None


def check_fabrics(exp: Experiment, builds: frozenset[str] | None = None) -> None:
    """The rules of what builds each fabric: its size, the datapath's link settings and the PFC policy on
    them (raises ``_Problem``); what the fabric verbs (``up``, ``bench``) check too. ``builds``: what the
    backend makes of it (``Backend.builds``; None: all); the datapath's plan and each queue's limit, quadratic
    in the GPUs (n = 16,384: 2^29 neighbour entries), only for a backend that builds them."""
    from fabrics import build_fabric
    from fabrics.datapath import plan_datapath
    from pfc import policy as pfc_policy
    from testbed.backends.base import DATAPATH, QUEUES

    p = exp.pfc
    if p.xon_bytes is not None and p.xoff_bytes is not None and p.xon_bytes >= p.xoff_bytes:
        raise _Problem("pfc.xon_bytes", f"must be < xoff_bytes {p.xoff_bytes} (got {p.xon_bytes})")
    builds = frozenset({DATAPATH, QUEUES}) if builds is None else builds
    for kind in exp.fabrics:
        spec = _attempt(lambda: fabric_spec(exp, kind), _LINK_KEYS, "link")
        fabric = _attempt(lambda: build_fabric(**spec.args), _FABRIC_KEYS, "gpus")
        if DATAPATH in builds:
            _attempt(lambda: plan_datapath(fabric, spec.datapath), _FABRIC_KEYS, "gpus")
        if QUEUES in builds:
            _attempt(lambda: pfc_policy.queue_limits(fabric, spec.datapath, spec.pfc), _PFC_KEYS, "pfc")
        elif spec.pfc is not None and spec.pfc.enabled:  # the settings alone
            _attempt(lambda: pfc_policy.resolve_on(spec.pfc, spec.datapath), _PFC_KEYS, "pfc")


def semantic_check(exp: Experiment) -> None:
    """Apply the rules of the code that will consume the values (raises ``_Problem``: key path, message)."""
    from traffic.model import rankmap

    try:
        builds = backends.get(exp.backend, exp.hosts).builds
    except TestbedError:  # refused by _check_backend below, with its key
        builds = None
    check_fabrics(exp, builds)
    s = exp.serving
    model = models.get_model(s.model)
    _attempt(lambda: models.check_tp(model, s.prefill_tp), {}, "serving.prefill_tp")
    _attempt(lambda: models.check_tp(model, s.decode_tp), {}, "serving.decode_tp")
    _attempt(lambda: placement.place(exp.gpus, s.prefill_tp, s.decode_tp, s.prefill_fraction),
             _PLACEMENT_KEYS, "serving")
    _attempt(lambda: rankmap.source_ranks(s.prefill_tp, s.decode_tp, 0), {}, "serving.decode_tp")
    if s.layout is not None:
        if s.prefill_ep is not None or s.decode_ep is not None:
            raise _Problem("serving.layout", f"{s.layout} sets the EP groups; expected serving.prefill_ep and "
                                             "serving.decode_ep null with a layout")
        if model.expert is None:
            raise _Problem("serving.layout", f"{s.layout} is a mixture-of-experts deployment; {s.model} is dense "
                                             "(expected a MoE model, or layout null)")
        _attempt(lambda: placement.layout_engines(s.layout, exp.gpus, exp.gpus_per_server, s.prefill_fraction),
                 {}, "serving.layout")
    if s.driver == "plan" and s.arrivals != "trace":
        raise _Problem("serving.arrivals", "closed-loop arrivals need serving.driver live: the planned replay "
                                           "times every transfer from the trace")
    if exp.trace.generated and not (s.driver == "live" and s.arrivals == "closed"):
        raise _Problem("trace.workload", f"{exp.trace.workload} is generated sessions without arrival times: "
                                         "expected serving.driver live with serving.arrivals closed")
    if s.driver == "plan" and exp.link.time_dilation != 1:
        raise _Problem("link.time_dilation", "time dilation needs serving.driver live: the planned replay times "
                                             "every transfer from the trace")
    for check in (_check_backend, _check_jobs, _check_faults, _check_paths_from):
        check(exp)
    _attempt(lambda: exp.twin.check_frame(exp.link.mtu), {}, "twin.burst_bytes")
    _check_serving(exp)


# the serving cluster's parameters its rules name (traffic.model.serving_spec: TrafficError.key) -> key paths
_SERVING_KEYS = {"prefill_ep": "serving.prefill_ep", "decode_ep": "serving.decode_ep", "gpu": "serving.gpu",
                 "model": "serving.model", "decode_kv_tokens": "serving.decode_memory"}


def _check_serving(exp: Experiment) -> None:
    """What a repetition would fail on that the experiment alone decides, found before any run directory exists:
    the requests it serves (an empty slice) and, live, the serving cluster's rules and whether it can serve them
    (``testbed.repetition.drivers.live.check_live``: the warm-up against the run, the EP groups' experts, the
    caches' and pools' sizes, each request's KV against a decode pool)."""
    from testbed.repetition.drivers.live import check_live
    from testbed.repetition.spec import served_requests
    from traffic.model.errors import TraceError

    spec = repetition_spec(exp, exp.fabrics[0])
    try:
        served_requests(spec)
    except TraceError as exc:
        raise _Problem("trace.path", str(exc)) from None
    except TestbedError as exc:
        raise _Problem(f"trace.{exc.key}" if exc.key in Trace.model_fields else "trace.start_s", str(exc)) from None
    if exp.serving.driver != "live":
        return
    try:
        check_live(spec, exp.gpus, spec.fabric.datapath.rate_bps)
    except TestbedError as exc:
        if exc.key in ("prefill_ep", "decode_ep") and exp.serving.layout is not None:
            raise _Problem("serving.layout", str(exc)) from None  # the layout sets the EP groups
        if exc.key != "warmup_s":
            raise _Problem(_SERVING_KEYS.get(exc.key, "serving"), str(exc)) from None
        t = exp.trace
        run = f"trace.duration_s {t.duration_s:g}" + (f" / trace.speed {t.speed:g}" if spec.run_s != t.duration_s
                                                      else "")
        raise _Problem("serving.warmup_s", f"{exp.serving.warmup_s:g} s is not shorter than the run's "
                                           f"{spec.run_s:g} cluster seconds ({run}): expected serving.warmup_s < "
                                           f"{spec.run_s:g}, or a longer trace.duration_s") from None


def _check_backend(exp: Experiment) -> None:
    """The backend exists (over the hosts file, if any) and supports what the experiment asks of it beyond
    carrying messages (cross traffic, faults)."""
    from testbed.backends.base import Conditions

    try:
        backends.get(exp.backend, exp.hosts).refuse_unsupported(
            Conditions(cross_flows=exp.cross_flows, faults=tuple(f.model_dump() for f in exp.faults)))
    except TestbedError as exc:
        raise _Problem(exc.key or "backend", str(exc)) from None


def _check_jobs(exp: Experiment) -> None:
    """A number of jobs is at least one, and above one only where repetitions do not share a live fabric."""
    if exp.jobs == "auto":
        return
    if exp.jobs < 1:
        raise _Problem("jobs", f"{exp.jobs} is not a number of processes: expected auto or a whole number >= 1")
    if exp.jobs > 1 and not backends.get(exp.backend, exp.hosts).forks:
        raise _Problem("jobs", f"{exp.jobs}: the {exp.backend} backend carries one repetition at a time (its "
                               "repetitions cannot run in forked processes): expected auto or 1; "
                               f"{', '.join(backends.FORKING)} run several at once")


def _check_paths_from(exp: Experiment) -> None:
    """A run directory of recorded paths fits this experiment: a backend that routes by itself, a recording per
    fabric and repetition made on the same wiring (``testbed.backends.paths.Recording``), the same workload and
    seed (so the same connections: ``testbed.report.workload``)."""
    if exp.paths_from is None:
        return
    from fabrics import build_fabric
    from testbed.backends.paths import RECORDING, Recording
    from testbed.report import workload

    if not backends.get(exp.backend).routes_itself:
        raise _Problem("paths_from", f"the {exp.backend} backend does not route connections itself: expected "
                                     f"backend {' or '.join(backends.ROUTE_THEMSELVES)} with recorded paths")
    run = Path(exp.paths_from)
    try:
        recorded = json.loads((run / "experiment.json").read_text())["experiment"]
    except (OSError, ValueError, KeyError, TypeError):
        raise _Problem("paths_from", f"{run}: no experiment.json: expected a run directory of `testbed run` on the "
                                     "emulated backend") from None
    differs = workload.differences(recorded, exp.model_dump(mode="json"))
    if differs or recorded.get("seed") != exp.seed:
        raise _Problem("paths_from", f"{run} ran another workload (it differs in "
                                     f"{', '.join(differs or ['seed'])}): expected a run of this experiment")
    for kind in exp.fabrics:
        model = build_fabric(**fabric_spec(exp, kind).args)
        for rep in range(1, exp.repetitions + 1):
            f = run / "runs" / kind / f"rep{rep}" / RECORDING
            if not f.is_file():
                raise _Problem("paths_from", f"{f} does not exist: expected a recording for every fabric and "
                                             f"repetition ({', '.join(exp.fabrics)} x {exp.repetitions})")
            try:
                Recording.load(f, model)
            except TestbedError as exc:
                raise _Problem("paths_from", str(exc)) from None


def _check_faults(exp: Experiment) -> None:
    """Every fault's target exists on every fabric it names, its action fits it, it begins within the run (or it
    would never be applied) and it does not begin while another fault holds its target (the second ``down`` of
    a cable, ``stop`` of a stopped controller, would not be applied)."""
    from fabrics import build_fabric
    from fabrics.failover import UNDO, parse_target

    run_s = repetition_spec(exp, exp.fabrics[0]).run_s if exp.faults else 0.0
    held: dict[tuple[str, str], list[tuple[int, float, float]]] = {}  # (fabric, target) -> (fault, begin, end)
    for i, f in enumerate(exp.faults):
        if f.at >= run_s:
            raise _Problem(f"faults[{i}].at", f"{f.at:g} s is not within the run's {run_s:g} s (it would never be "
                                              f"applied): expected at < {run_s:g}")
        for kind in exp.fabrics:
            text = f.target_on(kind)
            if text is None:
                continue
            try:
                target = parse_target(build_fabric(**fabric_spec(exp, kind).args), text)
            except TestbedError as exc:
                raise _Problem(f"faults[{i}].target", f"on {kind}: {exc}") from None
            end = f.at if f.action not in UNDO else math.inf if f.duration is None else f.at + f.duration
            for j, begin, until in held.setdefault((kind, target.text), []):
                if begin <= f.at < until or f.at <= begin < end:
                    to = "the end" if until == math.inf else f"{until:g} s"
                    raise _Problem(f"faults[{i}].at", f"on {kind}: {target.text} is held by faults[{j}] from "
                                                      f"{begin:g} s to {to}: expected faults on one target one "
                                                      "after the other")
            held[(kind, target.text)].append((i, f.at, end))
            fits = ("stop", "restart") if target.kind == "controller" else ("down",)
            if f.action not in fits:
                raise _Problem(f"faults[{i}].action", f"{f.action!r} does not fit {target.kind}: expected "
                                                     f"{' or '.join(fits)}")
            if f.action == "restart" and f.duration is not None:
                raise _Problem(f"faults[{i}].duration", "a restart has no duration: use action stop with a "
                                                        "duration to keep the controller down for a while")


@dataclass
class Resolved:
    """A validated experiment, where it came from and what the command line changed; its backend, resolved
    once (the object every repetition of the run is carried by)."""

    experiment: Experiment
    source: str | None  # the file, or None for the built-in defaults
    overrides: list[Override] = field(default_factory=list)
    raw: dict = field(default_factory=dict)  # the file's mapping before overrides

    @functools.cached_property
    def backend(self):
        """The experiment's backend (``testbed.backends``), over its hosts file if it names one."""
        return backends.get(self.experiment.backend, self.experiment.hosts)

    def as_dict(self) -> dict:
        return {"source": self.source, "overrides": [o.as_dict() for o in self.overrides],
                "experiment": self.experiment.model_dump(mode="json")}


def validate(raw: dict, label: str, base: Path | None = None, overrides: list[Override] = (),
             default_name: str = "default", fabric_only: bool = False) -> Experiment:
    """Schema + consumer rules for ``raw`` with ``overrides`` applied; one-line TestbedError on failure.
    ``fabric_only``: only the fabrics' rules (``check_fabrics``), for the verbs that build a fabric and run
    no experiment on it (``up``, ``bench``)."""
    overrides = list(overrides)
    try:
        data = apply_overrides(raw, overrides)
    except TestbedError as exc:
        raise TestbedError(f"{label}: {exc}", key=exc.key) from None
    try:
        exp = Experiment.model_validate(data, context={"base": base})
    except ValidationError as exc:
        raise TestbedError(_one_line(label, exc, overrides), key=_loc(tuple(exc.errors()[0]["loc"]))) from None
    if exp.name is None:
        exp = exp.model_copy(update={"name": default_name})
    try:
        check_fabrics(exp) if fabric_only else semantic_check(exp)
    except _Problem as p:
        origin = next((o.origin for o in reversed(overrides) if o.key == p.key), None)
        raise TestbedError(f"{label}: {p.key}{f' (from {origin})' if origin else ''}: {p.message}", key=p.key) from None
    return exp


def resolve(path: str | Path | None, overrides: list[Override] = ()) -> Resolved:
    """Load an experiment file (None: experiments/default.yaml), apply CLI overrides, validate everything."""
    p = Path(DEFAULT_EXPERIMENT if path is None else path)  # the default's choices are argued in its comments
    raw, base, source = experiment_file.read_file(p), p.resolve().parent, str(p.resolve())
    label = "default experiment" if path is None else str(p)
    stem = p.stem if p.name != "experiment.json" else p.parent.name
    exp = validate(raw, label, base, overrides, default_name=_safe_name(stem))
    return Resolved(exp, source, list(overrides), raw)


def _safe_name(stem: str) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-.") or "experiment"
    return name[:64]


# ------------------------------------------------------------------ schema
def json_schema() -> dict:
    """The JSON schema of experiment files (what experiments/schema.json holds)."""
    doc = Experiment.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "zcube-testbed/experiment", **doc}


def schema_text() -> str:
    return json.dumps(json_schema(), indent=1) + "\n"


def main() -> None:
    """``python -m testbed.experiment.schema``: regenerate experiments/schema.json."""
    SCHEMA_PATH.write_text(schema_text())
    print(SCHEMA_PATH)


if __name__ == "__main__":
    main()
