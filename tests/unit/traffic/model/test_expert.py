"""Expert-parallel dispatch/combine sizes: the MoE table, hand-computed messages, seeded routing."""

from __future__ import annotations

import dataclasses

import pytest

from common.errors import TestbedError
from traffic.model.expert import ep_traffic, ep_traffic_from_routing, expert_owners, expert_popularity
from traffic.model.models import MODELS, ExpertSpec, custom_model, get_model, kv_bytes_per_token, moe_models

# (hidden_size, n_routed_experts, num_experts_per_tok, n_shared_experts, MoE layers) as read
# from each model's public config.json (MoE layers = num_hidden_layers - first_k_dense_replace)
CONFIGS = {"deepseek-v3": (7168, 256, 8, 1, 58),   # 61 - 3
           "kimi-k2": (7168, 384, 8, 1, 60),       # 61 - 1
           "glm-4.5": (5120, 160, 8, 1, 89),       # 92 - 3
           "glm-5": (6144, 256, 8, 1, 75)}         # 78 - 3
# FP8 dispatch: hidden x 1 B + (hidden / 128) float32 scales; BF16 combine: hidden x 2 B
WIRE = {"deepseek-v3": (7168 + 56 * 4, 14_336), "kimi-k2": (7168 + 56 * 4, 14_336),
        "glm-4.5": (5120 + 40 * 4, 10_240), "glm-5": (6144 + 48 * 4, 12_288)}

# tiny made-up MoE: hidden 8, 4 experts, top-2; FP8 with one scale per 8 channels:
# dispatch 8 x 1 + 1 x 4 = 12 B per token, combine 8 x 2 = 16 B; 2 MoE layers
TINY_EP = ExpertSpec(hidden_size=8, routed_experts=4, experts_per_token=2, shared_experts=0,
                     moe_layers=2, scale_channels=8)
TINY = custom_model("tiny-moe", "gqa", layers=3, kv_heads=1, head_dim=8, expert=TINY_EP)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_moe_table_figures(name):
    e = get_model(name).expert
    assert (e.hidden_size, e.routed_experts, e.experts_per_token, e.shared_experts, e.moe_layers) == CONFIGS[name]
    assert (e.dispatch_dtype, e.combine_dtype, e.scale_channels) == ("fp8", "bf16", 128)
    assert (e.dispatch_bytes_per_token, e.combine_bytes_per_token) == WIRE[name]


def test_moe_list_and_dense_models_have_no_expert_traffic():
    assert sorted(moe_models()) == sorted(CONFIGS)
    for name in ("llama-3.1-8b", "llama-3.1-70b", "qwen3-32b"):
        assert get_model(name).expert is None and not get_model(name).is_moe
    assert "kimi-k2" not in MODELS                      # the experiment schema's list is unchanged
    assert kv_bytes_per_token(get_model("kimi-k2"), "bf16") == 61 * (512 + 64) * 2


@pytest.mark.parametrize("name", ["llama-3.1-70b", "qwen3-32b"])
def test_dense_models_are_refused(name):
    with pytest.raises(TestbedError, match=f"model {name} is dense") as info:
        ep_traffic([1, 2], 10, name)
    assert "\n" not in str(info.value) and "deepseek-v3" in str(info.value)


def test_tiny_explicit_routing_by_hand():
    # GPU 1 holds experts 0, 2; GPU 2 holds experts 1, 3 (round-robin)
    assert expert_owners([1, 2], 4) == [1, 2, 1, 2]
    routing = {1: [[0, 2],            # both local: nothing sent
                   [0, 1],            # one remote expert: one message to GPU 2
                   [1, 3]],           # two experts on GPU 2: still ONE message
               2: [[1, 3],            # local
                   [0, 3]]}           # one message to GPU 1
    t = ep_traffic_from_routing([1, 2], routing, TINY)
    assert t.dispatch_tokens == {(1, 2): 2, (2, 1): 1}
    assert t.dispatch_per_layer == {(1, 2): 24, (2, 1): 12}
    assert t.combine_per_layer == {(2, 1): 32, (1, 2): 16}
    assert t.dispatch_total == {(1, 2): 48, (2, 1): 24}
    assert t.combine_total == {(2, 1): 64, (1, 2): 32}
    assert t.received("dispatch") == {1: 12, 2: 24} and t.sent("combine") == {1: 16, 2: 32}
    assert t.received("combine", total=True) == {1: 64, 2: 32}
    assert t.load_ratio("dispatch") == 2.0
    assert t.rows() == [
        {"src": 1, "dst": 2, "dispatch_tokens": 2, "dispatch_bytes_per_layer": 24, "combine_bytes_per_layer": 16,
         "dispatch_bytes": 48, "combine_bytes": 32},
        {"src": 2, "dst": 1, "dispatch_tokens": 1, "dispatch_bytes_per_layer": 12, "combine_bytes_per_layer": 32,
         "dispatch_bytes": 24, "combine_bytes": 64}]


def test_tiny_bf16_dispatch_has_no_scales():
    bf16 = custom_model("tiny-bf16", "gqa", layers=3, kv_heads=1, head_dim=8,
                        expert=dataclasses.replace(TINY_EP, dispatch_dtype="bf16"))
    t = ep_traffic_from_routing([1, 2], {1: [[0, 1]]}, bf16)
    assert t.dispatch_per_layer == {(1, 2): 16} and t.combine_per_layer == {(2, 1): 16}


def test_real_fp8_dispatch_and_bf16_combine_by_hand():
    # DeepSeek-V3 on 2 GPUs: experts 0..7 alternate between them -> one message each way per token
    t = ep_traffic_from_routing([5, 13], {5: [list(range(8))]}, "deepseek-v3")
    assert t.dispatch_per_layer == {(5, 13): 7392} and t.combine_per_layer == {(13, 5): 14_336}
    assert t.dispatch_total == {(5, 13): 428_736} and t.combine_total == {(13, 5): 831_488}   # x 58 layers
    # GLM-4.5 on 4 GPUs: experts 0..7 sit on all 4 GPUs (two each): one message to each other GPU
    t = ep_traffic_from_routing([1, 2, 3, 4], {1: [list(range(8))]}, "glm-4.5")
    assert t.dispatch_per_layer == {(1, 2): 5280, (1, 3): 5280, (1, 4): 5280}
    assert t.combine_total == {(2, 1): 911_360, (3, 1): 911_360, (4, 1): 911_360}             # 10,240 x 89
    # experts all on the token's own GPU: nothing moves
    t = ep_traffic_from_routing([1, 2, 3, 4], {2: [[1, 5, 9, 13, 17, 21, 25, 29]]}, "glm-4.5")
    assert t.dispatch_per_layer == {} and t.rows() == []


def test_seeded_routing_with_degenerate_popularity_is_exact():
    # only experts 0 (GPU 1) and 1 (GPU 2) can be drawn: every token has one remote expert
    t = ep_traffic([1, 2], 10, TINY, popularity=[1, 1, 0, 0], seed=3)
    assert t.dispatch_per_layer == {(1, 2): 120, (2, 1): 120}
    # only experts 0 and 2, both on GPU 1: GPU 1 sends nothing, GPU 2 sends each token once
    t = ep_traffic([1, 2], {1: 7, 2: 10}, TINY, popularity=[2.0, 0, 1.0, 0])
    assert t.dispatch_tokens == {(2, 1): 10} and t.combine_per_layer == {(1, 2): 160}


def test_uniform_routing_sends_five_sixths_of_the_tokens():
    # top-2 of 4 uniform: the pair {0, 2} (both on GPU 1) has probability 1/6, so GPU 1 sends
    # 5/6 of its 60,000 tokens = 50,000 (standard deviation ~91)
    t = ep_traffic([1, 2], 60_000, TINY, popularity="uniform", seed=11)
    assert abs(t.dispatch_tokens[(1, 2)] - 50_000) < 1_000
    assert abs(t.dispatch_tokens[(2, 1)] - 50_000) < 1_000


def test_zipf_makes_destination_loads_uneven():
    group = list(range(1, 9))   # 8 GPUs, 32 DeepSeek-V3 experts each
    ratios = [ep_traffic(group, 2048, "deepseek-v3", popularity=p, zipf_s=s, seed=0).load_ratio()
              for p, s in (("uniform", 1.0), ("zipf", 0.5), ("zipf", 1.0), ("zipf", 2.0))]
    assert ratios == sorted(ratios) and len(set(ratios)) == 4
    assert ratios[0] < 1.06 and ratios[-1] > 1.9
    loads = ep_traffic(group, 2048, "deepseek-v3", popularity="zipf", zipf_s=1.0, seed=0).received()
    assert max(loads, key=loads.get) == 1          # GPU 1 holds expert 0, the most popular
    assert expert_popularity(4, "zipf", 1.0) == pytest.approx([12 / 25, 6 / 25, 4 / 25, 3 / 25])


def test_deterministic_per_seed():
    a = ep_traffic([1, 2, 3, 4], 500, "kimi-k2", popularity="zipf", zipf_s=1.1, seed=7)
    b = ep_traffic([1, 2, 3, 4], 500, "kimi-k2", popularity="zipf", zipf_s=1.1, seed=7)
    c = ep_traffic([1, 2, 3, 4], 500, "kimi-k2", popularity="zipf", zipf_s=1.1, seed=8)
    assert a.rows() == b.rows() and a.rows() != c.rows()
    assert a.experts_per_gpu == 96 and a.moe_layers == 60


@pytest.mark.parametrize("kwargs,message", [
    (dict(group=[1, 1]), "EP group [1, 1] lists GPU 1 twice"),
    (dict(group=[]), "EP group [] is not allowed"),
    (dict(group=[0, 1]), "EP group GPU 0 is not allowed"),
    (dict(group=[1, 2, 3]), "EP group of 3 GPUs does not divide 256 routed experts"),
    (dict(tokens_per_gpu=-1), "tokens per GPU -1 is not allowed"),
    (dict(tokens_per_gpu={1: 5}), "tokens per GPU given for GPUs [1]; expected exactly the EP group's GPUs [1, 2]"),
    (dict(popularity="pareto"), "expert popularity 'pareto' is not known; expected one of uniform, zipf"),
    (dict(popularity="zipf", zipf_s=0), "zipf exponent s 0 is not allowed"),
    (dict(popularity=[1.0, 2.0]), "expected one of uniform, zipf or a list of 256 non-negative weights"),
    (dict(popularity=[1.0] * 7 + [0.0] * 249), "7 experts with weight > 0; expected at least 8"),
    (dict(seed=-1), "seed -1 is not allowed"),
    (dict(model="gpt-5"), "model 'gpt-5' is not known"),
])
def test_bad_inputs_one_line(kwargs, message):
    args = dict(group=[1, 2], tokens_per_gpu=4, model="deepseek-v3") | kwargs
    with pytest.raises(TestbedError) as info:
        ep_traffic(**args)
    assert message in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("call,message", [
    (lambda: ep_traffic_from_routing([1, 2], {1: [[0, 0]]}, TINY), "token routing [0, 0] of GPU 1"),
    (lambda: ep_traffic_from_routing([1, 2], {1: [[0, 4]]}, TINY), "expected 2 distinct expert ids in 0..3"),
    (lambda: ep_traffic_from_routing([1, 2], {3: [[0, 1]]}, TINY), "routing given for GPUs [3] outside"),
    (lambda: ep_traffic([1, 2], 1, TINY).received("both"), "message kind 'both' is not known"),
    (lambda: ExpertSpec(8, 4, 5, 0, 1), "experts_per_token 5 is more than the 4 routed experts"),
    (lambda: ExpertSpec(100, 4, 2, 0, 1), "hidden_size 100 is not a multiple of scale_channels 128"),
    (lambda: ExpertSpec(128, 4, 2, 0, 1, dispatch_dtype="fp4"), "dispatch dtype 'fp4' is not known"),
    (lambda: ExpertSpec(128, 4, 2, 0, 0), "moe_layers 0 is not allowed"),
])
def test_bad_specs_and_routing_one_line(call, message):
    with pytest.raises(TestbedError) as info:
        call()
    assert message in str(info.value) and "\n" not in str(info.value)


# ---------------------------------------------------------------- the serving cluster's hit table
@dataclasses.dataclass
class _Spec:
    model: object
    popularity: str = "uniform"
    zipf_s: float = 1.0


def test_decode_table_is_each_destinations_share_of_the_experts_without_a_probe(monkeypatch):
    """Decode (one copy per chosen expert): GLM-5's 256 experts round-robin over 16 GPUs, uniform: every other
    GPU holds 1/16 of a token's 8 picks; taken from the popularity, no routing probe drawn."""
    import numpy as np

    from traffic.model import expert

    monkeypatch.setattr(expert, "ep_traffic", lambda *a, **k: pytest.fail("decode draws no probe"))
    group = tuple(range(17, 33))
    table = expert.HitTable(group, _Spec(get_model("glm-5")), seed=5, per_expert=True)
    assert len(table.share) == 16 * 15 and all(v == pytest.approx(1 / 16) for v in table.share.values())
    wire = WIRE["glm-5"]
    assert (table.dispatch_per_token, table.combine_per_token) == (wire[0] * 75, wire[1] * 75)
    rng = np.random.default_rng(0)
    steps = [table.tokens({g: 100 for g in group}, rng) for _ in range(200)]
    mean = sum(sum(s.values()) for s in steps) / (200 * 240)
    assert mean == pytest.approx(100 * 8 / 16, rel=0.02)  # binomial(800, 1/16) per pair
    assert table.tokens({g: 0 for g in group}, rng) == {}
    only = table.tokens({17: 100}, rng)  # a source without tokens sends nothing
    assert only and {a for a, _ in only} == {17}


def test_draws_follow_the_engines_stream_and_zipf_favours_the_first_gpu():
    import numpy as np

    from traffic.model.expert import HitTable

    group = tuple(range(1, 17))
    table = HitTable(group, _Spec(get_model("glm-5"), "zipf", 1.2), seed=0, per_expert=True)
    assert table.share[(2, 1)] > 3 * table.share[(2, 16)]  # GPU 1 holds expert 0, the most popular
    a = table.tokens({g: 50 for g in group}, np.random.default_rng(9))
    assert a == table.tokens({g: 50 for g in group}, np.random.default_rng(9))
    assert a != table.tokens({g: 50 for g in group}, np.random.default_rng(10))


def test_prefill_table_is_the_probes_token_share():
    """Prefill (one copy per destination GPU): the share of a probe routing's tokens each pair carries."""
    from traffic.model.expert import PROBE_TOKENS, HitTable

    group = (1, 2, 3, 4)
    table = HitTable(group, _Spec(TINY), seed=3, per_expert=False)
    probe = ep_traffic(group, PROBE_TOKENS, TINY, seed=3)
    assert table.share == {pair: n / PROBE_TOKENS for pair, n in probe.dispatch_tokens.items()}
    # 4 experts on 4 GPUs, top-2: a token's two picks are on two GPUs, its own among them half the time, so it is
    # copied to 2 - 1/2 = 1.5 other GPUs on average
    assert sum(table.share[(1, b)] for b in (2, 3, 4)) == pytest.approx(1.5, abs=0.05)
