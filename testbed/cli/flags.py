"""Every flag that sets an experiment key, defined once: flag -> key path; its type, choices and help come
from the key's field in the schema (``testbed.repetition.settings``, ``testbed.experiment.schema``).

``run``, ``sweep``, ``calibrate`` and ``replay`` take them as overrides (``add_experiment_flags``,
``overrides``: only the flags the user gave, each recorded with its flag); the fabric verbs (``up``,
``plan``, ``bench``) take the fabric, link and PFC groups with the schema's defaults filled in
(``add_group``), so a verb and an experiment file mean the same thing when a flag is left out.
"""

from __future__ import annotations

import argparse
import typing
from dataclasses import dataclass
from typing import Any, Callable

from pydantic import BeforeValidator

from common.errors import TestbedError


def _names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _alpha(text: str) -> float:
    from fractions import Fraction

    try:
        return float(Fraction(text))
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (e.g. 0.5 or 1/8)") from None


@dataclass(frozen=True)
class Flag:
    name: str  # "--prefill-tp"
    key: str  # the experiment key path it sets, "serving.prefill_tp"
    help: str | None = None  # None: the field's description
    type: Callable[[str], Any] | None = None  # the flag's text -> the key's value; None: by the field's type
    choices: tuple[str, ...] | None = None
    value: Callable[[Any], Any] | None = None  # what the parsed flag means for the key (--pfc on -> True)

    @property
    def dest(self) -> str:
        return self.name.lstrip("-").replace("-", "_")


FABRIC = (Flag("--gpus", "gpus", "number of GPUs n"), Flag("--gpus-per-switch", "gpus_per_switch"),
          Flag("--cables", "cables"), Flag("--gpus-per-server", "gpus_per_server"), Flag("--radix", "radix"))
LINK = (Flag("--rate", "link.rate", "link rate (a bare number: Mbit/s)"), Flag("--buffer", "link.buffer_bytes"),
        Flag("--nic-buffer", "link.nic_buffer_bytes"),
        Flag("--burst", "link.burst_bytes"), Flag("--mtu", "link.mtu"))
PFC = (Flag("--pfc", "pfc.enabled", "PFC-style pause from queue thresholds", choices=("on", "off"),
            value=lambda v: v == "on"),
       Flag("--pfc-xoff", "pfc.xoff_bytes"), Flag("--pfc-xon", "pfc.xon_bytes"),
       Flag("--pfc-headroom", "pfc.headroom_bytes"), Flag("--pfc-poll-us", "pfc.poll_us"),
       Flag("--pfc-alpha", "pfc.dynamic_alpha", type=_alpha))
TRACE = (Flag("--trace", "trace.path", "trace file, plain or .gz (relative to the current folder)"),
         Flag("--format", "trace.format"), Flag("--skip-bad", "trace.skip_bad", "skip bad trace rows"),
         Flag("--start", "trace.start_s"), Flag("--duration", "trace.duration_s"), Flag("--first", "trace.first_n"),
         Flag("--speed", "trace.speed"))
SERVING = (Flag("--model", "serving.model"), Flag("--dtype", "serving.dtype"),
           Flag("--prefill-tp", "serving.prefill_tp"), Flag("--decode-tp", "serving.decode_tp"),
           Flag("--prefill-fraction", "serving.prefill_fraction"), Flag("--scheduler", "serving.scheduler"),
           Flag("--mode", "serving.mode"), Flag("--chunk", "serving.chunk_bytes"), Flag("--policy", "serving.policy"),
           Flag("--connections", "serving.connections"), Flag("--driver", "serving.driver"),
           Flag("--arrivals", "serving.arrivals"), Flag("--concurrency", "serving.concurrency"),
           Flag("--dilation", "link.time_dilation"))
REPETITION = (Flag("--backend", "backend"), *FABRIC, *LINK, Flag("--represents", "link.represents"), *PFC, *TRACE,
              *SERVING,
              Flag("--seed", "seed", "seed of repetition 1 (repetition r: seed + r - 1)"),
              Flag("--cross", "cross_flows"), Flag("--paths-from", "paths_from"))
RUN = (Flag("--fabrics", "fabrics", "comma list, e.g. zcube,roft", type=_names), Flag("--reps", "repetitions"),
       Flag("--jobs", "jobs", "repetitions carried at once on a simulated backend (auto: the CPUs)"),
       Flag("--name", "name"), *REPETITION)


def _field(key: str):
    from testbed.experiment.schema import Experiment, section_at

    parts = key.split(".")
    model = section_at(parts[:-1]) if len(parts) > 1 else Experiment
    return model.model_fields[parts[-1]]


def _base(annotation):
    """The annotation without Optional: (type, has a unit parser)."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Union:
        annotation = next(a for a in args if a is not type(None))
    if typing.get_origin(annotation) is typing.Annotated:
        meta = typing.get_args(annotation)[1:]
        return typing.get_args(annotation)[0], any(isinstance(m, BeforeValidator) for m in meta)
    return annotation, False


def _argument(flag: Flag) -> dict:
    """argparse keywords for ``flag`` from its field: choices, type, help."""
    field = _field(flag.key)
    base, parsed = _base(field.annotation)
    parsed = parsed or any(isinstance(m, BeforeValidator) for m in field.metadata)
    kw: dict = {"dest": flag.dest, "help": flag.help or field.description}
    if flag.choices or typing.get_origin(base) is typing.Literal:
        kw["choices"] = list(flag.choices or typing.get_args(base))
    elif base is bool:
        kw["action"] = "store_true"
    elif flag.type is not None:
        kw["type"] = flag.type
    elif base in (int, float) and not parsed:
        kw["type"] = base
    return kw  # anything else stays text: the schema parses units (3mbit, 64KiB, 2m) as in a file


def _default_text(flag: Flag) -> Any:
    """The schema's default as the flag would be written (a rate in Mbit/s, a size in bytes; 0 for none)."""
    value = _field(flag.key).default
    if flag.key == "link.rate":
        return f"{value / 1e6:g}mbit"
    if flag.key == "link.represents":
        return f"{value / 1e9:g}gbit"
    if _argument(flag).get("type") is None and not _argument(flag).get("choices") and flag.key != "trace.path":
        return str(value or 0)
    return value


def add_flags(p: argparse.ArgumentParser, flags: tuple[Flag, ...], defaults: bool = False) -> list[str]:
    """Add ``flags`` to ``p`` (defaults None, or with ``defaults`` the schema's); their dests."""
    for flag in flags:
        kw = _argument(flag)
        kw["default"] = None
        if defaults:
            kw["default"] = _default_text(flag)
            kw["help"] = f"{kw['help']} (default {kw['default']})"
        p.add_argument(flag.name, **kw)
    return [f.dest for f in flags]


def overrides(args: argparse.Namespace, flags: tuple[Flag, ...] = RUN) -> list:
    """The flags the user gave, as overrides (in table order), then every --set in order."""
    from testbed.experiment.schema import Override, cli_value

    out = []
    for flag in flags:
        value = getattr(args, flag.dest, None)
        if value is None or value is False and _argument(flag).get("action") == "store_true":
            continue
        out.append(Override(flag.key, flag.value(value) if flag.value else value, flag.name))
    for text in getattr(args, "set", None) or []:
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise TestbedError(f"--set {text!r}: expected KEY=VALUE, e.g. --set pfc.xoff_bytes=30000")
        out.append(Override(key.strip(), cli_value(key.strip(), value.strip()), "--set"))
    return out


def add_set(p: argparse.ArgumentParser) -> None:
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="any experiment key, e.g. --set pfc.xoff_bytes=30000 (repeatable; applied last)")
