"""Named serving layouts (traffic.model.placement.SERVING_LAYOUTS): each maps onto whole 8-GPU servers as
docs/serving.md says its source runs it: engine form (TP instance or EP group), GPUs per engine, servers."""

from __future__ import annotations

import pytest

from common.errors import TestbedError
from traffic.model.placement import SERVING_LAYOUTS, EngineShape, layout_engines


def shape(engines) -> list[tuple[str, tuple[int, ...]]]:
    """Per engine: 'tp' (one unit of several GPUs) or 'ep' (single-GPU units), and its GPUs."""
    return [("ep" if len(e) > 1 else "tp", tuple(g for u in e for g in u.gpus)) for e in engines]


def span(a: int, b: int) -> tuple[int, ...]:
    return tuple(range(a, b + 1))


def test_the_glm5_recipe_prefills_inside_one_server_and_decodes_in_ep16_over_two():
    # Dynamo's GLM-5 recipe: TP4 prefill on one 4-GPU node -> one TP8 instance a server;
    # TP16/DP16/EP16 decode -> EP groups of 16 GPUs, two servers each
    e = layout_engines("glm5-recipe", 32)
    assert shape(e["prefill"]) == [("tp", span(1, 8)), ("tp", span(9, 16))]
    assert shape(e["decode"]) == [("ep", span(17, 32))]
    e = layout_engines("glm5-recipe", 64)
    assert shape(e["prefill"]) == [("tp", span(1, 8)), ("tp", span(9, 16)), ("tp", span(17, 24)),
                                   ("tp", span(25, 32))]
    assert shape(e["decode"]) == [("ep", span(33, 48)), ("ep", span(49, 64))]
    assert all(len(u.gpus) == 1 for u in e["decode"][0])  # data-parallel attention: every GPU a unit


def test_single_node_keeps_both_kinds_inside_a_server():
    e = layout_engines("single-node", 32)
    assert shape(e["prefill"]) == [("tp", span(1, 8)), ("tp", span(9, 16))]
    assert shape(e["decode"]) == [("ep", span(17, 24)), ("ep", span(25, 32))]


def test_large_ep_groups_up_to_four_prefill_and_nine_decode_servers():
    # at n = 32 each kind has two servers: one EP16 group each (the layout before issue 24)
    e = layout_engines("large-ep", 32)
    assert shape(e["prefill"]) == [("ep", span(1, 16))] and shape(e["decode"]) == [("ep", span(17, 32))]
    e = layout_engines("large-ep", 64)  # 4 + 4 servers: EP32 (DeepSeek's and SGLang's prefill) and EP32
    assert shape(e["prefill"]) == [("ep", span(1, 32))] and shape(e["decode"]) == [("ep", span(33, 64))]
    e = layout_engines("large-ep", 128)  # 8 + 8 servers: two EP32 prefill groups; decode 8 servers (<= 9): EP64
    assert shape(e["prefill"]) == [("ep", span(1, 32)), ("ep", span(33, 64))]
    assert shape(e["decode"]) == [("ep", span(65, 128))]


def test_two_server_ep_is_the_earlier_default_and_stays_two_servers_at_larger_n():
    e = layout_engines("two-server-ep", 32)
    assert shape(e["prefill"]) == [("ep", span(1, 16))] and shape(e["decode"]) == [("ep", span(17, 32))]
    e = layout_engines("two-server-ep", 64)
    assert shape(e["prefill"]) == [("ep", span(1, 16)), ("ep", span(17, 32))]
    assert shape(e["decode"]) == [("ep", span(33, 48)), ("ep", span(49, 64))]


def test_a_group_larger_than_a_kind_takes_the_largest_divisor_of_its_servers():
    assert EngineShape("ep", 9).servers_per_engine(32) == 8  # EP72 on 32 decode servers: EP64
    assert EngineShape("ep", 4).servers_per_engine(6) == 3
    assert EngineShape("ep", 2).servers_per_engine(1) == 1  # n = 16: one server a kind
    assert shape(layout_engines("glm5-recipe", 16)["decode"]) == [("ep", span(9, 16))]


def test_every_layout_has_a_source_and_unknown_names_are_refused():
    assert all(lay.source for lay in SERVING_LAYOUTS.values())
    with pytest.raises(TestbedError, match="serving layout 'ep-everywhere' is not known; expected one of "
                                           "glm5-recipe, single-node, large-ep, two-server-ep"):
        layout_engines("ep-everywhere", 32)
    with pytest.raises(TestbedError, match="a tensor-parallel engine of 2 servers is not supported"):
        EngineShape("tp", 2)
