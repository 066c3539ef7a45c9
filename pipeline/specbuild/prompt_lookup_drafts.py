"""Prompt lookup (n-gram) drafting, defined once: the reference runtime imports it, and the repository writer
copies this file into `tensorrt_llm_bls/1/` (the BLS runs in NVIDIA's containers where specbuild is not
installed). Pure Python, standard library only.

Find the last n tokens earlier in `tokens` (the prompt and the text so far), longest n first
(max_ngram_size down to 1); propose the tokens that followed the most recent earlier occurrence that has a
continuation (Saxena 2023; TensorRT-LLM's NGram drafter proposes the same way).
"""

DEFAULT_MAX_MATCHING_NGRAM_SIZE = 2


def propose(tokens, max_ngram_size, num_draft_tokens):
    """At most `num_draft_tokens` drafts for `tokens`; [] when nothing matches."""
    if num_draft_tokens <= 0:
        return []
    tokens = list(tokens)
    length = len(tokens)
    for n in range(min(max_ngram_size, length - 1), 0, -1):
        tail = tokens[length - n:]
        for start in range(length - n - 1, -1, -1):  # latest occurrence first, excluding the tail itself
            if tokens[start:start + n] == tail:
                return tokens[start + n:start + n + num_draft_tokens]
    return []
