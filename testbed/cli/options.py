"""What the fabric verbs (``up``, ``plan``, ``path``, ``bench``) make of the fabric, link and PFC flags
(``testbed.cli.flags``, defined once with the schema's defaults), and how a verb that writes a directory
prints its result."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

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


def fabric_spec(args: argparse.Namespace, kind: str | None = None):
    """The ``FabricSpec`` (``testbed.backends.base``) the fabric, link and PFC flags ask for, made as an experiment
    file's is: the same schema, the same rules (``testbed.experiment.schema.check_fabrics``, PFC resolved on the
    links) and one-line errors naming the flag; a verb without PFC flags gets PFC off."""
    from testbed.experiment.schema import Override, validate
    from testbed.experiment.schema import fabric_spec as spec_of

    kind = kind or args.fabric
    given = [Override("fabrics", [kind], "the fabric argument")]
    if not hasattr(args, "pfc"):
        given.append(Override("pfc.enabled", False, "no PFC flags"))
    given += flags.overrides(args, flags.FABRIC + flags.LINK + (flags.PFC if hasattr(args, "pfc") else ()))
    return spec_of(validate({}, "flags", overrides=given, fabric_only=True), kind)


def fabric_from(args: argparse.Namespace, kind: str):
    """The fabric model the fabric flags describe."""
    from fabrics import build_fabric

    return build_fabric(**fabric_spec(args, kind).args)


def print_result(doc: dict, table: list[str], where: str | Path, as_json: bool) -> None:
    """``--json``: the document; else its table, then the directory it was written to, last."""
    if as_json:
        print(json.dumps(doc, indent=1))
        return
    for line in table:
        print(line)
    print(where)
