"""Pure helpers of the specbuild BLS (no Triton, no numpy needed): drafting and bookkeeping for one round.

Kept beside model.py (the python backend puts the version folder on sys.path) so that they can be tested alone.
Prompt-lookup drafting is specbuild/standalone/prompt_lookup_drafts.py, copied beside this file by the repository writer.
"""


def accepted_prefix(drafts, produced):
    """How many drafts the target accepted: the length of the common prefix of the drafts and the tokens the
    target produced for them (the first produced token that differs is the target's correction)."""
    count = 0
    for d, t in zip(drafts, produced):
        if d != t:
            break
        count += 1
    return count


def plain_steps_after_verification(accepted, produced):
    """Target forwards of a round after the one that verified its drafts: the round asks the target for
    len(drafts) + 1 tokens, so after a partial acceptance (the accepted drafts plus the target's own token) it
    decodes the rest one token per forward (reference/decoder/methods/external_drafts.py; TensorRT-LLM's request with
    external draft tokens runs until its request_output_len as any other request)."""
    return max(0, produced - (accepted + 1))


def ends_with_stop_word(tokens, stop_words):
    """True when `tokens` ends with one of the stop words (lists of token ids)."""
    return any(word and len(tokens) >= len(word) and tokens[len(tokens) - len(word):] == list(word)
               for word in stop_words)


def round_seed(seed, round_index, salt):
    """A distinct, reproducible random stream per round and per model. Reusing one seed for every round (and
    for both the draft and the target) would correlate the draws of different rounds and the draft's proposal
    with the target's acceptance test, and bias sampled output."""
    base = 0 if seed is None else int(seed)
    mixed = (base * 6364136223846793005 + (round_index + 1) * 1442695040888963407 + salt * 0x9E3779B97F4A7C15)
    return mixed % (1 << 63)


class TextStream:
    """Turns a growing token sequence into text deltas whose concatenation is exactly the decoded whole:
    each call decodes everything so far and returns what was not sent yet, holding back a trailing U+FFFD
    (a multi-byte character split between chunks) until it completes or the stream ends."""

    def __init__(self, decode):
        self.decode = decode  # tokens -> str
        self.sent = ""

    def push(self, tokens, final=False):
        text = self.decode(tokens)
        if not final and text.endswith("\ufffd"):
            text = text.rstrip("\ufffd")
        if not text.startswith(self.sent):
            # the decoded prefix changed (a tokenizer merges across the boundary): send only what is new
            common = 0
            for a, b in zip(text, self.sent):
                if a != b:
                    break
                common += 1
            delta = text[common:] if final else ""
            if final:
                self.sent = text
            return delta
        delta = text[len(self.sent):]
        self.sent = text
        return delta
