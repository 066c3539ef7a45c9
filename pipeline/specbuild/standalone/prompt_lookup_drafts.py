"""Prompt lookup (n-gram) drafting, defined once: the reference runtime imports it, and the repository writer
copies this file into `tensorrt_llm_bls/1/` (the BLS runs in NVIDIA's containers where specbuild is not
installed). Pure Python, standard library only.

Find the last n tokens earlier in `tokens` (the prompt and the text so far), longest n first
(max_ngram_size down to 1), and propose the tokens that followed their oldest earlier occurrence (Saxena 2023).
That is the match TensorRT-LLM's NGram pool serves with its defaults `is_keep_all` and `is_use_oldest`
(tensorrt_llm/_torch/speculative/ngram.py `NGramPoolManager.get_draft_tokens`: per pattern it keeps the matches in
the order seen, a shorter one dropped when a longer one arrives, and serves the first; the oldest occurrence has
the longest continuation), computed here from the tokens instead of a pool carried across steps, and transformers'
prompt lookup takes the first occurrence too. Two differences remain: that pool is shared by all requests
(`is_public_pool`, the LLM API's default) where this looks at one request's tokens, and the engine path's example
pool (examples/ngram/run_dtm_ngram.py `NgramPool`) overwrites a pattern's match until one is max_draft_len long,
so while every occurrence is that close to the end it serves the newest.
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
        for start in range(length - n):  # oldest occurrence first, excluding the tail itself
            if tokens[start:start + n] == tail:
                return tokens[start + n:start + n + num_draft_tokens]
    return []
