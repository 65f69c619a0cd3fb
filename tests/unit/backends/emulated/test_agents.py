"""The agents both drivers fork: same shape, orders from a plan or from the coordinator."""

from pathlib import Path

from testbed.backends.emulated import agents


def test_plan_and_control_agents_differ_only_in_their_orders(tmp_path):
    plans = {"gpu3": Path("/p/gpu3.plan.jsonl")}
    planned, = agents.agent_specs([3], agents.plan_orders(plans), tmp_path, 30.0, "persistent")
    live, = agents.agent_specs([3], agents.control_orders(Path("/s/control.sock")), tmp_path, 30.0, "persistent")
    assert planned.netns == live.netns == "tb-gpu3"
    assert "--plan" in planned.argv and planned.argv[planned.argv.index("--plan") + 1] == "/p/gpu3.plan.jsonl"
    assert "--t0-stdin" in planned.argv and "--control" not in planned.argv
    assert live.argv[live.argv.index("--control") + 1] == "/s/control.sock" and "--plan" not in live.argv
    listens = [live.argv[i + 1] for i, a in enumerate(live.argv) if a == "--listen"]
    assert listens == ["10.1.0.3:7000", "10.2.0.3:7000"]
