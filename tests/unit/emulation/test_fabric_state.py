"""FabricState: the state file keeps its bytes, and the dict-style reads still give the dict's values."""

import json
from dataclasses import asdict

import pytest

from fabrics import build_fabric
from fabrics.datapath import DatapathConfig, plan_datapath
from pfc.policy import PfcConfig
from testbed.emulation.state import Created, FabricState

FABRIC = {"kind": "zcube", "gpus": 16, "gpus_per_switch": 8, "cables": 4}


def _dict_state(pfc: PfcConfig | None) -> dict:
    """The state as ``up`` built it when it was a dict, key by key in the same order."""
    config = DatapathConfig()
    plan = plan_datapath(build_fabric(**FABRIC), config)
    created = Created(netns=["tb-gpu1", "tb-gpu2"], links=["sw1-eth1", "sw1-rx"], ovs_bridges=["sw1"])
    return {"fabric": dict(FABRIC), "config": asdict(plan.config), "controller_port": 40123,
            "controller_pid": None, "created": created.as_dict(), "queues": [asdict(q) for q in plan.queues],
            "timings": {}, "warnings": [], "state_dir": "/run/zcube-testbed",
            "pfc": asdict(pfc) if pfc is not None else {"enabled": False},
            "queue_limits": {"sw1:1": 150000} if pfc is not None else {}}


def _stages(doc: dict) -> list[dict]:
    """The state file at each save of a bring-up: fresh, controller started, built, ready."""
    started = doc | {"controller_pid": 4242}
    built = started | {"ovs_restore": {"pmd-maxsleep": None},
                       "created": started["created"] | {"qos_uuid": "0f3e9c1a-1111-2222-3333-444455556666"}}
    ready = built | {"timings": {"netns_s": 0.1, "up_s": 5.2}, "warnings": ["small send buffer"],
                     "controller_status": {"miss_packets": 0, "cabling": {"expected": 8, "wrong": {}}}}
    return [doc, started, built, ready]


@pytest.mark.parametrize("pfc", [None, PfcConfig(xoff_bytes=60000)], ids=["lossy", "pfc"])
def test_every_saved_stage_reads_and_writes_back_byte_for_byte(pfc):
    for doc in _stages(_dict_state(pfc)):
        text = json.dumps(doc, indent=1)
        assert FabricState.from_json(text).to_json() == text


def test_a_state_built_with_attributes_saves_as_the_dict_did():
    doc = _stages(_dict_state(PfcConfig()))[-1]
    st = FabricState(fabric=doc["fabric"], config=doc["config"], created=Created.from_dict(doc["created"]),
                     controller_port=doc["controller_port"], queues=doc["queues"], state_dir=doc["state_dir"],
                     pfc=doc["pfc"], queue_limits=doc["queue_limits"])
    st.controller_pid = doc["controller_pid"]
    st.ovs_restore = doc["ovs_restore"]
    st.timings.update(doc["timings"])
    st.warnings.extend(doc["warnings"])
    st.controller_status = doc["controller_status"]
    assert st.to_json() == json.dumps(doc, indent=1)


def test_attributes_give_the_files_values():
    for doc in _stages(_dict_state(PfcConfig())):
        st = FabricState.from_json(json.dumps(doc, indent=1))
        for key, value in doc.items():
            got = getattr(st, key)
            assert (got.as_dict() if key == "created" else got) == value
        assert not hasattr(st, "get") and not hasattr(st, "__getitem__")  # typed: no dict-style reads


def test_attributes_and_helpers():
    st = FabricState.from_json(json.dumps(_stages(_dict_state(PfcConfig()))[-1], indent=1))
    assert st.pfc_enabled and st.controller_pid == 4242 and st.created.qos_uuid.startswith("0f3e")
    assert st.created.netns == ["tb-gpu1", "tb-gpu2"] and str(st.directory) == "/run/zcube-testbed"
    assert st.model().describe() == build_fabric(**FABRIC).describe()
    assert not FabricState.from_json(json.dumps(_dict_state(None), indent=1)).pfc_enabled


def test_a_partial_or_newer_file_still_reads():
    """A file with only some entries reads with defaults; entries this version does not know are kept."""
    st = FabricState.from_json(json.dumps({"fabric": FABRIC, "future": [1, 2]}))
    assert st.model().n_gpus == 16 and st.controller_pid is None and st.created.netns == []
    assert not st.pfc_enabled and st.ovs_restore is None
    assert st.extra == {"future": [1, 2]} and json.loads(st.to_json())["future"] == [1, 2]
