"""Is a folder a PARD draft TensorRT-LLM can serve for this target? Read from the two config.json files (and the
draft's embedding rows when known), as TensorRT-LLM reads them:

- the mask token: speculative_config.mask_token_id when given, else the draft config's `pard_token`, else its
  `mask_token_id`, else its `vocab_size` (tensorrt_llm/_torch/models/modeling_speculative.py `PARDForCausalLM`,
  search-index id 54558751816: "Fall back: pard_token -> mask_token_id -> vocab_size"; llm_args.py@0004396 PARDDecodingConfig.mask_token_id:
  "If None, it will be read from the draft model config (typically vocab_size)"). The draft feeds it K - 1 times per
  step (pard.py@80aa8ca), so it must be a row of the draft's embedding: the last fallback, vocab_size, is one past
  the rows a Hugging Face checkpoint has (vocab_size of them) unless its embedding is larger.
- the vocabulary: the drafts are target token ids, so the draft reads and writes the target's vocabulary; the mask is
  either one extra id after it (draft vocab = target vocab + 1, mask = target vocab: what specbuild's zoo trains) or
  an id inside a shared vocabulary (AMD's recipe spends an unused id: pard/pard_train.py@8a0d2bd `pard_token`).
- max_draft_len > 0 (PARDWorker asserts it).
"""

from __future__ import annotations

from typing import Any


def mask_token_id(draft_config: dict[str, Any], override: int | None = None) -> tuple[int | None, str]:
    """(the mask token TensorRT-LLM uses, where it came from)."""
    if override is not None:
        return int(override), "speculative_config.mask_token_id"
    for key in ("pard_token", "mask_token_id", "vocab_size"):
        value = draft_config.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value, f"config.json {key}"
    return None, "config.json (none of pard_token, mask_token_id, vocab_size)"


def pard_problems(
    draft_config: dict[str, Any],
    target_config: dict[str, Any],
    *,
    mask_override: int | None = None,
    embedding_rows: int | None = None,
    max_draft_len: int | None = None,
) -> list[str]:
    """Every reason this draft cannot serve PARD for this target ([] when none). `embedding_rows`: the draft's input
    embedding rows from its weights' headers (None: taken as its vocab_size)."""
    problems: list[str] = []
    if max_draft_len is not None and max_draft_len < 1:
        problems.append(f"max_draft_len is {max_draft_len}: PARD drafts at least one token per step (set it > 0)")
    draft_vocab, target_vocab = draft_config.get("vocab_size"), target_config.get("vocab_size")
    if not isinstance(draft_vocab, int) or not isinstance(target_vocab, int):
        return problems + ["config.json lacks vocab_size (draft or target): cannot tell the mask token's place"]
    rows = embedding_rows if embedding_rows is not None else draft_vocab
    mask, source = mask_token_id(draft_config, mask_override)
    if mask is None or not 0 <= mask < rows:
        fix = (
            "add pard_token to the draft's config.json (the id of its mask token)"
            if source == "config.json vocab_size"
            else "give a mask token id inside the draft's vocabulary"
        )
        problems.append(
            f"the mask token is {mask} ({source}), outside the draft's {rows} embedding rows: every PARD step feeds it "
            f"to the draft — {fix}"
        )
        return problems
    if draft_vocab == target_vocab + 1:
        if mask != target_vocab:
            problems.append(
                f"the draft's vocabulary ({draft_vocab}) is the target's ({target_vocab}) plus one id, but the mask "
                f"token is {mask} ({source}), not that extra id {target_vocab}: the draft would propose id "
                f"{target_vocab}, which the target does not have — set pard_token: {target_vocab}"
            )
    elif draft_vocab != target_vocab:
        problems.append(
            f"the draft's vocabulary has {draft_vocab} ids, the target's {target_vocab}: a PARD draft reads and "
            "writes the target's token ids, with at most one extra id for its mask token — use a draft trained with "
            "the target's tokenizer"
        )
    return problems
