"""Suffix-automaton drafting (TensorRT-LLM's `SA` decoding type and the `sa_config` enhancer): the automaton
(automaton.py), the per-request and global pools of automata (pool.py). Pure Python, no torch: the recipe side,
the reference runtime and the tests all read the same code."""
