"""What the benchmarks' subcommands share: the fabric argument, --logs and --json, and the checks before
a fabric is built."""

from __future__ import annotations

import sys

from testbed.cli.options import add_fabric_options, add_link_options


def log(message: str) -> None:
    print(message, file=sys.stderr)


def add_common(p, fabric_required: bool = False, logs_help: str | None = None, link: bool = True) -> None:
    """The fabric (zcube when left out, unless required), the fabric's size and links, --logs, --json."""
    from fabrics import FABRICS

    if fabric_required:
        p.add_argument("fabric", choices=FABRICS)
    else:
        p.add_argument("fabric", nargs="?", choices=FABRICS, default="zcube", help="default zcube")
    add_fabric_options(p)
    if link:
        add_link_options(p)
    if logs_help:
        p.add_argument("--logs", help=logs_help)
    p.add_argument("--json", action="store_true")


def new_logs_dir(args) -> None:
    """--logs DIR: made if missing, so DIR or else its folder must exist and take new files."""
    if args.logs:
        from testbed.cli.outputs import require_new_dir

        require_new_dir(args.logs, "--logs")


def preflight(args, check=new_logs_dir) -> None:
    """A bad --logs (or other output) fails before root, OVS or a fabric is needed; then root and OVS."""
    from testbed.emulation import fabricctl

    check(args)
    fabricctl.require_root()
    fabricctl.require_ovs()
