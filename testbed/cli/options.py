"""What the fabric verbs (``up``, ``plan``, ``path``, ``bench``) make of the fabric, link and PFC flags
(``testbed.cli.flags``, defined once with the schema's defaults), and how a verb that writes a directory
prints its result."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from common.units import parse_rate, parse_size
from testbed.cli import flags


def add_fabric_options(p: argparse.ArgumentParser) -> list[str]:
    """--gpus, --gpus-per-switch, --cables, --gpus-per-server, --radix (the schema's top-level keys)."""
    return flags.add_flags(p, flags.FABRIC, defaults=True)


def add_link_options(p: argparse.ArgumentParser) -> list[str]:
    """--rate, --represents, --buffer, --nic-buffer, --burst, --mtu (the schema's link section), as text the
    units parse."""
    return flags.add_flags(p, flags.LINK, defaults=True)


def add_pfc_options(p: argparse.ArgumentParser, default: str = "off") -> list[str]:
    """--pfc and its thresholds; ``default`` differs by verb (bench pfc compares on with off)."""
    dests = flags.add_flags(p, flags.PFC)
    p.set_defaults(pfc=default)
    return dests


def fabric_from(args: argparse.Namespace, kind: str):
    """The fabric model the fabric flags describe."""
    from fabrics import build_fabric

    return build_fabric(kind, gpus=args.gpus, gpus_per_switch=args.gpus_per_switch, cables=args.cables,
                        gpus_per_server=args.gpus_per_server, radix=args.radix)


def fabric_kwargs(args) -> dict:
    """What ``build_fabric`` / ``fabricctl.up`` take for ``args.fabric``."""
    from fabrics import fabric_args

    return fabric_args(args.fabric, args.gpus, args.gpus_per_switch, args.cables, args.gpus_per_server, args.radix)


def datapath_config(args):
    """The DatapathConfig the link flags ask for (checked)."""
    from fabrics.datapath import DatapathConfig

    return DatapathConfig(rate_bps=parse_rate(args.rate), mtu=args.mtu, buffer_bytes=parse_size(args.buffer),
                          nic_buffer_bytes=parse_size(args.nic_buffer),
                          burst_bytes=parse_size(args.burst)).validate()


def pfc_config(args):
    """The PfcConfig the flags ask for (None when the parser has no PFC flags)."""
    if not hasattr(args, "pfc"):
        return None
    from pfc.policy import PfcConfig

    kw = {"enabled": args.pfc == "on"}
    for flag, key in (("pfc_xoff", "xoff_bytes"), ("pfc_xon", "xon_bytes"), ("pfc_headroom", "headroom_bytes")):
        if getattr(args, flag, None) is not None:
            kw[key] = parse_size(getattr(args, flag))
    if getattr(args, "pfc_poll_us", None) is not None:
        kw["poll_us"] = args.pfc_poll_us
    if getattr(args, "pfc_alpha", None) is not None:
        kw["dynamic_alpha"] = args.pfc_alpha
    return PfcConfig(**kw)


def print_result(doc: dict, table: list[str], where: str | Path, as_json: bool) -> None:
    """``--json``: the document; else its table, then the directory it was written to, last."""
    if as_json:
        print(json.dumps(doc, indent=1))
        return
    for line in table:
        print(line)
    print(where)
