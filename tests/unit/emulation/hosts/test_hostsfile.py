"""The hosts file: what it accepts, and the one line it prints for each mistake."""

from __future__ import annotations

import pytest

from common.errors import TestbedError
from testbed.emulation.hosts import hostsfile

GOOD = """\
hosts:
  - {name: ph1, address: 10.250.0.1, user: root, key: id_ed25519, known_hosts: known_hosts}
  - {name: ph2, address: worker-2.lab, user: tb, key: /keys/k, port: 2222, project: /opt/tb}
"""


def _load(tmp_path, text):
    f = tmp_path / "hosts.yaml"
    f.write_text(text)
    return hostsfile.load(f)


def test_good_file(tmp_path):
    h = _load(tmp_path, GOOD)
    assert h.names == ["ph1", "ph2"] and h.first.name == "ph1"
    assert h["ph1"].key == str(tmp_path / "id_ed25519")  # relative to the file
    assert h["ph1"].known_hosts == str(tmp_path / "known_hosts")
    assert h["ph2"].key == "/keys/k" and h["ph2"].port == 2222
    assert h["ph2"].python_path("/work/x") == "/opt/tb/.venv/bin/python"
    assert h["ph1"].python_path("/work/x") == "/work/x/.venv/bin/python"


@pytest.mark.parametrize("text,line", [
    ("hosts:\n  - {name: ph1, address: 10.0.0.1, user: root}\n", "host 1 (ph1): key: missing"),
    ("hosts:\n  - {name: ph1, adress: 10.0.0.1, user: root, key: k}\n", "host 1 (ph1): adress: unknown key"),
    ("hosts:\n  - {name: a, address: 10.0.0.1, user: root, key: k}\n"
     "  - {name: b, address: 10.0.0.300, user: root, key: k}\n",
     "host 2 (b): address: '10.0.0.300' is neither an IP address nor a DNS name"),
    ("hosts:\n  - {name: 1x, address: 10.0.0.1, user: root, key: k}\n", "host 1 (1x): name: '1x' is not a host name"),
    ("hosts:\n  - {name: a, address: 10.0.0.1, user: root, key: k, port: 0}\n", "host 1 (a): port: Input should be"),
    ("hosts:\n  - {name: a, address: 'fe80::1', user: root, key: k}\n", "host 1 (a): address: fe80::1: only IPv4"),
    ("hosts:\n  - {name: a, address: 10.0.0.1, user: root, key: k}\n"
     "  - {name: a, address: 10.0.0.2, user: root, key: k}\n", "host a: name a is also host a's"),
    ("hosts:\n  - {name: a, address: 10.0.0.1, user: root, key: k}\n"
     "  - {name: b, address: 10.0.0.1, user: root, key: k}\n", "host b: address 10.0.0.1 is also host a's"),
    ("hosts: []\n", "hosts: List should have at least 1 item"),
    ("- a\n", "expected a mapping with a 'hosts' list"),
    ("hosts:\n  - {name: a\n", "not valid YAML (line"),
    ("hosts:\n  - {name: a, address: 10.0.0.1, user: root, key: k}\nextra: 1\n", "extra: unknown key"),
])
def test_mistakes_are_one_line_naming_host_and_key(tmp_path, text, line):
    with pytest.raises(TestbedError) as exc:
        _load(tmp_path, text)
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith(f"hosts file {tmp_path / 'hosts.yaml'}: ")
    assert line in msg, msg


def test_same_address_other_port_is_another_host(tmp_path):
    h = _load(tmp_path, "hosts:\n  - {name: a, address: 10.0.0.1, user: r, key: k}\n"
                        "  - {name: b, address: 10.0.0.1, user: r, key: k, port: 2200}\n")
    assert len(h) == 2


def test_missing_file_is_one_line(tmp_path):
    with pytest.raises(TestbedError, match="hosts file .*nope.yaml: No such file"):
        hostsfile.load(tmp_path / "nope.yaml")


def test_dump_round_trips(tmp_path):
    rows = [{"name": "ph1", "address": "10.250.0.1", "user": "root", "key": "/k"}]
    f = tmp_path / "h.yaml"
    f.write_text(hostsfile.dump(rows))
    assert hostsfile.load(f).first.address == "10.250.0.1"
