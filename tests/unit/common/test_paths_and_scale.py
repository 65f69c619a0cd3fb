"""common.paths (the child processes' environment, paths shown to a user) and common.scale (bytes per emulated
byte, a full packet's payload), by hand."""

from __future__ import annotations

import os

import pytest

from common import scale
from common.paths import REPO, module_env, shown


def test_a_child_runs_this_checkout_whatever_the_environment_says(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/an/installed/copy")
    monkeypatch.setenv("TESTBED_SOMETHING", "kept")
    env = module_env()
    assert env["PYTHONPATH"] == str(REPO) and env["TESTBED_SOMETHING"] == "kept"
    assert os.environ["PYTHONPATH"] == "/an/installed/copy"  # the caller's own environment is left alone


def test_bytes_scale_is_real_bytes_per_emulated_byte_and_the_payload_is_the_mss():
    assert scale.bytes_scale(3e6, 200e9) == pytest.approx(200e9 / 3e6)
    assert scale.bytes_scale() == scale.REAL_LINK_BPS / scale.DEFAULT_RATE_BPS
    assert scale.payload_bytes(1500) == 1500 - scale.TCP_IP_HEADER_BYTES
    assert scale.payload_bytes(10) == 1  # never nothing


def test_a_relative_path_is_shown_as_given():
    assert shown("reports/x") == "reports/x" and shown(REPO) == "."
