"""Token trees for tree-based speculative decoding (Medusa, EAGLE, lookahead), by concern:

| module | holds |
|---|---|
| `tree/shape.py` | `Tree` (parents, depths, ancestors, mask), `tree_from_choices` / `_parents` / `_sequences`, `chain_tree`, `check_choices`, `path_tokens` |
| `tree/feed.py` | `RowTree`, `feed_trees` (one target forward over every row's tree), `commit_paths` (keep the accepted path) |
| `../acceptance.py` | `Acceptance`, `greedy_accept`, `sample_accept`: the one acceptance core of chains and trees |
| `../verify.py` | `verify_tree`, `verify_chain`: a request's drafts against the target's logits (sampling settings, bad words) |
| `../drafters.py` | `drafter_precision`: the dtype (or int8 matmuls) Medusa/EAGLE heads draft in |

Everything but `verify_tree` (import it from ../verify.py, which imports torch and this package) is importable from
here, as before the split. Importing this package does not import torch.
"""

from specbuild.reference.decoder.acceptance import Acceptance, accept_or_residual, greedy_accept, sample_accept  # noqa: F401
from specbuild.reference.decoder.drafters import BF16_DRAFTER_MIN_HIDDEN, drafter_precision  # noqa: F401
from specbuild.reference.decoder.tree.feed import RowTree, commit_paths, feed_trees  # noqa: F401
from specbuild.reference.decoder.tree.shape import (  # noqa: F401
    MC_SIM_7B_63,
    ROOT_ONLY,
    Tree,
    chain_tree,
    check_choices,
    path_tokens,
    prefix_order_problem,
    tree_from_choice_prefix,
    tree_from_choices,
    tree_from_parents,
    tree_from_sequences,
)
