from specbuild.facts.trees import (
    MC_SIM_7B_63,
    format_choices,
    non_leaves_per_level,
    parse_choices,
    tree_depth,
    tree_problems,
)


def test_default_tree_is_well_formed_63_nodes_depth_4():
    assert tree_problems(MC_SIM_7B_63) == []
    assert len(MC_SIM_7B_63) == 63 and tree_depth(MC_SIM_7B_63) == 4
    # EAGLE's default max_non_leaves_per_layer is 10: the default tree must fit it.
    assert max(non_leaves_per_level(MC_SIM_7B_63).values()) <= 10


def test_format_round_trips_in_backend_format():
    text = format_choices([[0], [0, 0], [1]])
    assert text == "{0}, {0, 0}, {1}"
    assert parse_choices(text) == [[0], [0, 0], [1]]
    assert parse_choices(format_choices(MC_SIM_7B_63)) == MC_SIM_7B_63


def test_problems_name_the_path_and_the_fix():
    problems = dict(tree_problems([[0], [2, 1], [0], [], [-1]]))
    assert "no parent [2]" in problems[1]
    assert "repeats entry 0" in problems[2]
    assert "empty path" in problems[3]
    assert "negative index" in problems[4]


def test_non_leaves_counts_parents_per_level():
    assert non_leaves_per_level([[0], [1], [0, 0], [1, 0], [0, 0, 0]]) == {1: 2, 2: 1}
