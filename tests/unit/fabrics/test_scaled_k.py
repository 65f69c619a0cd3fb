"""The scale study's fabric rule (gpus_per_switch: auto): ZCube k is the smallest power of two with
k^2 >= 2n, or with k^2 >= n when 2k ports would not fit a 51.2T switch (256 x 200G), and experiments/scale.yaml
resolves to it at every n of its sweep."""

from __future__ import annotations

import pytest

from common.errors import TestbedError
from fabrics import build_fabric
from fabrics.zcube import scaled_k
from testbed.experiment.schema import EXAMPLES_DIR, Override, fabric_spec, resolve, validate


@pytest.mark.parametrize("n,k,cables,radix", [(32, 8, 2, 16), (64, 16, 4, 32), (128, 16, 2, 32), (256, 32, 4, 64),
                                              (512, 32, 2, 64), (2048, 64, 2, 128), (4096, 128, 4, 256),
                                              (8192, 128, 2, 256), (16384, 128, 1, 256)])
def test_the_rule_gives_non_blocking_zcubes_and_roft_of_the_same_radix(n, k, cables, radix):
    assert scaled_k(n) == k
    z = build_fabric("zcube", gpus=n, gpus_per_switch=k)
    assert z.params["cables"] == cables and {s.radix for s in z.switches.values()} == {radix}
    assert z.oversubscription == 1.0
    r = build_fabric("roft", gpus=n, gpus_per_switch=k)
    assert {s.radix for s in r.switches.values()} == {radix}


def test_auto_in_an_experiment_and_its_refusals():
    exp = validate({"gpus": 512, "gpus_per_switch": "auto"}, "t")
    assert exp.gpus_per_switch == 32 and fabric_spec(exp, "zcube").args["gpus_per_switch"] == 32
    assert validate({"gpus": 32}, "t").gpus_per_switch == 8  # the default is untouched
    with pytest.raises(TestbedError, match="gpus_per_switch"):
        validate({"gpus": 40, "gpus_per_switch": "auto"}, "t")
    with pytest.raises(TestbedError):
        scaled_k(0)
    with pytest.raises(TestbedError, match="gpus=32768 needs ZCube switches of 512 ports"):
        scaled_k(32768)


def test_the_blogs_cluster_is_one_layer_of_51t_switches():
    """16,384 dual-port NICs: 128 multi-rail + 128 single-rail switches of 256 ports, one cable per odd-even pair;
    ROFT of the same switches needs two tiers: 256 rail leaves and 128 spines."""
    z = build_fabric("zcube", gpus=16384, gpus_per_switch=scaled_k(16384))
    roles = [s.role for s in z.switches.values()]
    assert roles.count("odd") == roles.count("even") == 128
    assert {len(s.ports) for s in z.switches.values()} == {256}
    assert len(z.fabric_cables) == 128 * 128 and z.oversubscription == 1.0
    r = build_fabric("roft", gpus=16384, gpus_per_switch=scaled_k(16384))
    roles = [s.role for s in r.switches.values()]
    assert roles.count("leaf") == 256 and roles.count("spine") == 128
    assert {s.radix for s in r.switches.values()} == {256} and {len(s.ports) for s in r.switches.values()} == {256}


def test_scale_yaml_sweeps_gpus_on_the_twin():
    r = resolve(EXAMPLES_DIR / "scale.yaml")
    assert r.experiment.backend == "ns3" and r.experiment.sweep == {"gpus": [32, 64, 128, 256, 512]}
    for n in r.experiment.sweep["gpus"]:
        exp = resolve(EXAMPLES_DIR / "scale.yaml", [Override("gpus", n, "test")]).experiment
        assert exp.gpus_per_switch == scaled_k(n)


def test_scale_load_yaml_holds_four_requests_in_flight_per_gpu():
    from testbed.experiment import sweep

    r = resolve(EXAMPLES_DIR / "scale-load.yaml")
    assert r.experiment.backend == "ns3" and r.experiment.sweep_paired
    params = [(k, [str(v) for v in vals]) for k, vals in r.experiment.sweep.items()]
    points = sweep.resolve_points(EXAMPLES_DIR / "scale-load.yaml", [], params, paired=True)
    assert len(points) == 5
    for _, res in points:
        exp = res.experiment
        assert exp.serving.concurrency == 4 * exp.gpus and exp.gpus_per_switch == scaled_k(exp.gpus)
