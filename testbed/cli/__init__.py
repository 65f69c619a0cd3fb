"""Command line: `python -m testbed <verb> ...`.

This package holds the verbs, one module per group (``plan``, ``fabric``, ``fault``, ``bench`` (a package: one
module per benchmark), ``replay``, ``run``, ``sensitivity``, ``spread``, ``report``, ``compare``, ``crosscheck``,
``hosts``, ``scale``);
every flag that sets an experiment key is defined once in ``flags`` (flag -> key path), the fabric and PFC options
of the fabric verbs and benchmarks in ``options``, output folders in ``outputs``; this module only assembles the
parser and runs a verb. Library code never imports from here.

Every verb is a function taking the parsed arguments and returning an exit
status. A ``TestbedError`` becomes one line on stderr (exit 2, or the error's
own status); argparse mistakes likewise, without the usage dump; so does an
``OSError`` (exit 2, naming the path, or the verb's output flag when the OS
names none, e.g. a full disk during a write). SIGTERM and SIGHUP (a closed terminal) interrupt
a verb as Ctrl-C does, so it removes what it half made (exit 130).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from common.errors import TestbedError


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):  # noqa: D401 - argparse API
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    from testbed.cli import (
        bench,
        compare,
        crosscheck,
        fabric,
        fault,
        hosts,
        plan,
        replay,
        report,
        run,
        scale,
        sensitivity,
        spread,
    )

    parser = OneLineParser(prog="testbed", description="ZCube vs rail-optimized fat-tree testbed")
    sub = parser.add_subparsers(dest="verb", required=True, parser_class=OneLineParser)
    # in the order --help lists the verbs
    plan.register(sub)  # plan, path, cost
    fabric.register(sub)  # up, down, exec, cli, status
    fault.register(sub)  # fault link|switch|controller
    bench.register(sub)  # bench fidelity|pfc|replay|exchange|failover
    fabric.register_clean(sub)  # clean
    replay.register(sub)  # replay
    run.register(sub)  # run, sweep, calibrate
    sensitivity.register(sub)  # sensitivity
    spread.register(sub)  # spread (ROFT over ECMP outcomes)
    scale.register(sub)  # scale (the per-GPU load at growing n)
    report.register(sub)  # report
    compare.register(sub)  # compare (several runs' headlines: do they agree?)
    crosscheck.register(sub)  # crosscheck (the ns-3 twin beside the emulator)
    hosts.register(sub)  # hosts pseudo|check (several machines)
    return parser


def _interrupt(signum, frame):
    """SIGTERM and SIGHUP clean up as Ctrl-C does. SIGHUP: the terminal is gone, so writing to it would fail
    half way through the clean-up; what would have gone there goes nowhere from here on."""
    if signum == signal.SIGHUP:
        _detach_from_terminal()
    raise KeyboardInterrupt


def _detach_from_terminal() -> None:
    """Point stdout and stderr (the fds, so child processes' too) at /dev/null when they are a terminal."""
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        for fd in (1, 2):
            try:
                if os.isatty(fd):
                    os.dup2(null, fd)
            except OSError:  # the terminal already refuses even isatty: it is gone
                os.dup2(null, fd)
    finally:
        os.close(null)


# the flags naming where a verb writes, for an OSError that names no file (a full disk during a write)
OUTPUT_FLAGS = ("graph", "out", "logs", "html")


def _output_of(args) -> str | None:
    for dest in OUTPUT_FLAGS:
        value = getattr(args, dest, None)
        if isinstance(value, str) and value:
            return f"--{dest} {value}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)  # 'kill' cleans up like Ctrl-C does
    signal.signal(signal.SIGHUP, _interrupt)  # and so does a closed terminal
    try:
        return args.func(args) or 0
    except TestbedError as exc:
        print(f"testbed: error: {exc}", file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt:
        print("testbed: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into head & co.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:  # a path the user gave (or the disk) refused: one line, never a traceback
        from testbed.cli.outputs import os_error_line

        print(f"testbed: error: {os_error_line(exc, _output_of(args))}", file=sys.stderr)
        return 2
