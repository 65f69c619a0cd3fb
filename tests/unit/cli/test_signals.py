"""A closed terminal (SIGHUP) and 'kill' (SIGTERM) interrupt a verb as Ctrl-C does: its clean-up runs and the
exit status is 130 (issue 28). Before: SIGHUP killed the process on the spot, its clean-up never ran."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from common.paths import REPO

VERB = """
import argparse, os, signal, sys, time
from testbed import cli

def verb(args):
    try:
        os.kill(os.getpid(), signal.{sig})
        time.sleep(30)  # the signal interrupts this
        return 0
    finally:
        print("cleaned up", flush=True)

parser = argparse.ArgumentParser()
parser.set_defaults(func=verb)
cli.build_parser = lambda: parser
sys.exit(cli.main([]))
"""


@pytest.mark.parametrize("sig", ["SIGHUP", "SIGTERM", "SIGINT"])
def test_the_signal_runs_the_clean_up_and_exits_130(sig):
    proc = subprocess.run([sys.executable, "-c", VERB.format(sig=sig)], cwd=REPO, capture_output=True, text=True,
                          timeout=60, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert (proc.returncode, proc.stdout, proc.stderr) == (130, "cleaned up\n", "testbed: interrupted\n")
