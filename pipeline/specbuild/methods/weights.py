"""The findings every method's checkpoint gets, and the target's: its weights are there, whole, and of the
layout the method reads (specbuild/checkpoints/checkpoint_tensors.py tells the layout from the tensor names)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from specbuild.checkpoints import checkpoint_tensors
from specbuild.checkpoints.checkpoint_tensors import CAUSAL_LM, EAGLE1, WeightLayout
from specbuild.findings import Finding
from specbuild.checkpoints.checkpoint_files import WEIGHT_PATTERNS, checkpoint_root, has_weights, read_hf_config


def weights_findings(
    folder: Path, value, want: WeightLayout, field: tuple = ("speculation", "checkpoint")
) -> Iterator[Finding]:
    """The folder's weights must be there and be `want`'s layout (specbuild.checkpoints.checkpoint_tensors): an EAGLE-1
    head given to method eagle3, a Medusa folder given as the target, a draft with fewer decoder layers than its
    config.json are refused here rather than when a server loads them (where transformers would initialise the
    missing tensors at random). Weights whose names cannot be read without loading them pass."""
    folder = Path(folder)
    where = ".".join(map(str, field))
    if not has_weights(folder):
        yield Finding(
            field,
            f"{value} has no weights ({', '.join(WEIGHT_PATTERNS[:2])} ...) — point {where} at "
            f"the complete folder of {want.label}",
        )
        return
    root = checkpoint_root(folder)
    if shards := checkpoint_tensors.missing_shards(folder, root):
        yield Finding(
            field,
            f"{value}: its shard index names {len(shards)} weight file(s) that are not there "
            f"({', '.join(shards[:3])}{', ...' if len(shards) > 3 else ''}) — the download is incomplete; "
            "fetch the missing files",
        )
        return
    files = checkpoint_tensors.preferred_files(folder, want)
    for name, have, promised in checkpoint_tensors.truncated(folder, files, root=root)[:1]:
        yield Finding(
            field,
            f"{value}/{name} is truncated ({have:,} of the {promised:,} bytes its header lists) — "
            "the download was interrupted; fetch the file again",
        )
        return
    names = checkpoint_tensors.tensor_names(folder, files, root=root)
    if names is None:
        return
    found = checkpoint_tensors.layout(names)
    if found != want:
        shown = ", ".join(checkpoint_tensors.evidence(names, found) if found else sorted(names)[:3])
        what = (
            f"{found.label} ({shown}, ...), which {found.read_by} takes"
            if found
            else f"tensors of no layout specbuild reads ({shown}, ...)"
        )
        yield Finding(field, f"{value} holds {what}, not {want.label} — point {where} at a folder of {want.label}")
        return
    if want in (CAUSAL_LM, EAGLE1):  # both number their decoder layers as config.json counts them
        cfg = read_hf_config(folder) or {}
        layers = next((cfg[k] for k in ("num_hidden_layers", "n_layer", "num_layers") if k in cfg), None)
        if isinstance(layers, int) and not isinstance(layers, bool):
            missing = checkpoint_tensors.missing_layers(names, layers)
            if missing:
                yield Finding(
                    field,
                    f"{value}/config.json has {layers} decoder layers but the weights hold no "
                    f"tensors of layer{'s' if len(missing) > 1 else ''} {_ranges(missing)} — the "
                    "checkpoint is incomplete or its config.json belongs to another model",
                )


def _ranges(numbers: list[int]) -> str:
    """[1, 2, 3, 7] -> "1-3, 7"."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in runs)
