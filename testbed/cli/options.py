"""Flags several verbs share: the fabric's size, its links, PFC; and what they map onto; and how
a verb that writes a directory prints its result.

Their defaults are the experiment schema's (``testbed.experiment.schema``), read from its
fields, so a verb and an experiment file mean the same thing when a flag is left out.
Each ``add_*`` function returns the dests it added.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from testbed import scale
from testbed.units import parse_rate, parse_size

FABRIC_DESTS = ("gpus", "gpus_per_switch", "cables", "gpus_per_server", "radix")


def add_fabric_options(p: argparse.ArgumentParser) -> list[str]:
    """--gpus, --gpus-per-switch, --cables, --gpus-per-server, --radix (the schema's top-level keys)."""
    from testbed.experiment.schema import Experiment

    d = {dest: Experiment.model_fields[dest].default for dest in FABRIC_DESTS}
    p.add_argument("--gpus", type=int, default=d["gpus"], help=f"number of GPUs n (default {d['gpus']})")
    p.add_argument("--gpus-per-switch", type=int, default=d["gpus_per_switch"],
                   help=f"ZCube k (default {d['gpus_per_switch']})")
    p.add_argument("--cables", type=int, default=d["cables"],
                   help="ZCube parallel cables per odd-even pair (default k^2/n when whole, else 1)")
    p.add_argument("--gpus-per-server", type=int, default=d["gpus_per_server"],
                   help=f"ROFT server size (default {d['gpus_per_server']})")
    p.add_argument("--radix", type=int, default=d["radix"],
                   help="ROFT switch radix (default: the radix of the ZCube with the same n, k)")
    return list(FABRIC_DESTS)


def add_link_options(p: argparse.ArgumentParser) -> list[str]:
    """--rate, --buffer, --nic-buffer, --burst, --mtu (the schema's link section), as text the units parse."""
    from testbed.experiment.schema import Link

    d = {key: field.default for key, field in Link.model_fields.items()}
    rate = f"{d['rate'] / 1e6:g}mbit"  # a bare number would mean Mbit/s
    p.add_argument("--rate", default=rate,
                   help=f"link rate (default {rate}, standing for {d['represents'] / 1e9:g} Gbit/s)")
    p.add_argument("--buffer", default=str(d["buffer_bytes"]), help="switch egress buffer per port, bytes")
    p.add_argument("--nic-buffer", default=str(d["nic_buffer_bytes"] or 0),
                   help=f"host NIC queue, bytes (default {scale.DEFAULT_NIC_QUEUE_PACKETS} frames, Linux's txqueuelen)")
    p.add_argument("--burst", default=str(d["burst_bytes"]), help="shaper burst, bytes")
    p.add_argument("--mtu", type=int, default=d["mtu"])
    return ["rate", "buffer", "nic_buffer", "burst", "mtu"]


def add_fabric_and_link_options(p: argparse.ArgumentParser) -> list[str]:
    """Both groups above; their dests (``run`` and its kin default them to None)."""
    return add_fabric_options(p) + add_link_options(p)


def add_pfc_options(p: argparse.ArgumentParser, default: str = "off") -> list[str]:
    """--pfc and its thresholds; ``default`` differs by verb (bench pfc compares on with off)."""
    p.add_argument("--pfc", default=default, choices=["on", "off"],
                   help=f"PFC-style pause from queue thresholds (default {default})")
    p.add_argument("--pfc-xoff", help="XOFF threshold per switch queue, bytes (default half the buffer)")
    p.add_argument("--pfc-xon", help="XON threshold, bytes (default XOFF - 2 frames)")
    p.add_argument("--pfc-headroom", help="headroom per feeding link, bytes (default: 2 frames + 2 ms at the rate)")
    p.add_argument("--pfc-poll-us", type=int, help="PFC helper poll interval, microseconds (default 500)")
    p.add_argument("--pfc-alpha", type=_alpha, help="dynamic threshold: XOFF = ALPHA x the switch's free shared "
                   "buffer (1/128 .. 8, e.g. 0.5 or 1/8; default: static thresholds)")
    return ["pfc", "pfc_xoff", "pfc_xon", "pfc_headroom", "pfc_poll_us", "pfc_alpha"]


def _alpha(text: str) -> float:
    from fractions import Fraction

    try:
        return float(Fraction(text))
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (e.g. 0.5 or 1/8)") from None


def fabric_from(args: argparse.Namespace, kind: str):
    """The fabric model the fabric flags describe."""
    from testbed.fabric import build_fabric

    return build_fabric(kind, gpus=args.gpus, gpus_per_switch=args.gpus_per_switch, cables=args.cables,
                        gpus_per_server=args.gpus_per_server, radix=args.radix)


def fabric_kwargs(args) -> dict:
    """What ``build_fabric`` / ``fabricctl.up`` take for ``args.fabric``."""
    from testbed.fabric import fabric_args

    return fabric_args(args.fabric, args.gpus, args.gpus_per_switch, args.cables, args.gpus_per_server, args.radix)


def datapath_config(args):
    """The DatapathConfig the link flags ask for (checked)."""
    from testbed.emulation.datapath import DatapathConfig

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
