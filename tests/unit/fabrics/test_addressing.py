import pytest

from common.errors import TestbedError
from fabrics import addressing as a


@pytest.mark.parametrize("gpu", [1, 2, 255, 256, 257, 1024, 16384, 65535])
@pytest.mark.parametrize("port", [1, 2])
def test_address_plan_round_trips(gpu, port):
    assert a.parse_ip(a.ip_of(gpu, port)) == (gpu, port)
    octets = a.mac_of(gpu, port).split(":")
    assert octets[:3] == ["02", "00", "0a"] and (int(octets[4], 16) * 256 + int(octets[5], 16), int(octets[3])) == \
        (gpu, port)


def test_address_examples():
    assert a.ip_of(5, 1) == "10.1.0.5"
    assert a.ip_of(300, 2) == "10.2.1.44"
    assert a.mac_of(5, 1) == "02:00:0a:01:00:05"
    assert a.host_intf(32, 2) == "gpu32-p2"
    assert len(a.switch_intf("spine12", 16)) <= 15


def test_addresses_are_unique_per_port():
    ips = {a.ip_of(g, p) for g in range(1, 2049) for p in (1, 2)}
    macs = {a.mac_of(g, p) for g in range(1, 2049) for p in (1, 2)}
    assert len(ips) == len(macs) == 4096


@pytest.mark.parametrize("bad", ["10.3.0.1", "11.1.0.1", "10.1.0.0", "nonsense"])
def test_foreign_addresses_are_rejected(bad):
    with pytest.raises(TestbedError):
        a.parse_ip(bad)


@pytest.mark.parametrize("gpu,port", [(0, 1), (1, 3), (70000, 1)])
def test_out_of_range_ports_are_rejected(gpu, port):
    with pytest.raises(TestbedError):
        a.ip_of(gpu, port)
