"""Fixtures for the reference runtime: random-init tiny Llamas saved as real checkpoints, and engine folders
built from them with `build_engine` (so every test also goes through the engine folder)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[2]
# The shipped zoo; SPECBUILD_TINY_ZOO points the same tests at another zoo build (e.g. the micro profile).
SHIPPED_TINY = Path(os.environ.get("SPECBUILD_TINY_ZOO", REPO / "checkpoints" / "tiny"))

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
torch.set_num_threads(1)  # speed does not matter here; the machines have 2 cores shared by many jobs


def save_random_llama(
    folder: Path,
    *,
    vocab: int,
    hidden: int,
    layers: int,
    seed: int,
    init: float = 0.2,
    heads: int = 4,
    kv_heads: int = 2,
    base: Path | None = None,
    noise: float = 0.0,
) -> Path:
    """A random-init LlamaForCausalLM saved as a Hugging Face folder.

    init: weight std (0.2 rather than transformers' 0.02 gives peaked next-token distributions, so greedy ties
    are far apart). base + noise: a perturbed copy of another saved model (a draft that mostly agrees)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    if base is not None:
        model = LlamaForCausalLM.from_pretrained(base)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(noise * p.std() * torch.randn_like(p))
    else:
        cfg = LlamaConfig(
            vocab_size=vocab,
            hidden_size=hidden,
            intermediate_size=2 * hidden,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            max_position_embeddings=1024,
            initializer_range=init,
            bos_token_id=None,
            eos_token_id=None,
            pad_token_id=None,
        )
        model = LlamaForCausalLM(cfg)
    model.save_pretrained(folder)
    return folder


LIMITS = dict(max_batch_size=8, max_input_len=64, max_seq_len=160, max_num_tokens=512, max_draft_len=6)


@pytest.fixture(scope="session")
def models(tmp_path_factory) -> dict[str, Path]:
    """Checkpoints: target (vocab 128), a draft that mostly agrees with it, an unrelated draft, and a
    vocabulary-16 target/draft pair for the sampling tests."""
    root = tmp_path_factory.mktemp("models")
    out = {"target": save_random_llama(root / "target", vocab=128, hidden=64, layers=2, seed=0)}
    out["draft_close"] = save_random_llama(
        root / "draft_close", vocab=128, hidden=64, layers=2, seed=1, base=out["target"], noise=0.05
    )
    out["draft_far"] = save_random_llama(root / "draft_far", vocab=128, hidden=32, layers=1, seed=2)
    out["target16"] = save_random_llama(root / "target16", vocab=16, hidden=32, layers=2, seed=3, init=0.1)
    out["draft16"] = save_random_llama(root / "draft16", vocab=16, hidden=32, layers=1, seed=4, init=0.1)
    return out


@pytest.fixture(scope="session")
def engine_factory(tmp_path_factory):
    """make(model_dir, method="none", role="target", decoding=None, **limits) -> loaded Engine (cached)."""
    from specbuild.reference.engine_folder import build_engine, load_engine

    root = tmp_path_factory.mktemp("engines")
    cache: dict = {}

    def make(model_dir: Path, method: str = "none", role: str = "target", decoding: dict | None = None, **limits):
        key = (str(model_dir), method, role, repr(sorted((decoding or {}).items())), repr(sorted(limits.items())))
        if key not in cache:
            folder = root / f"engine{len(cache)}"
            build_engine(
                folder,
                role=role,
                method=method,
                decoding=decoding,
                model_dir=model_dir,
                dtype="float32",
                limits={**LIMITS, **limits},
            )
            cache[key] = load_engine(folder)
        return cache[key]

    return make


@pytest.fixture(scope="session")
def shipped_tiny() -> Path:
    """The shipped tiny zoo (checkpoints/tiny), or skip when it is not in this checkout yet."""
    if (
        not (SHIPPED_TINY / "target" / "config.json").is_file()
        or not (SHIPPED_TINY / "draft" / "config.json").is_file()
    ):
        pytest.skip(f"{SHIPPED_TINY} (target/, draft/) is not in this checkout yet (built by the zoo issue)")
    return SHIPPED_TINY
