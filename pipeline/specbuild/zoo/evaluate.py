"""Quality figures measured on held-out prompts, with our own simple greedy speculative simulation.

The target continues each held-out prompt greedily; every drafter is then replayed against that
continuation exactly as greedy speculative decoding would run it (chains, no trees): at each step the
drafter proposes up to k tokens from the accepted prefix, the longest matching prefix is accepted, and
the target adds one bonus token. Mean acceptance length (AL) counts that bonus token:
AL = (accepted draft tokens + steps) / steps (specbuild.facts.metrics).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from specbuild.heads.eagle import cache_kwarg
from specbuild.facts.metrics import acceptance_rate, mean_acceptance_length
from specbuild.zoo.teacher import new_cache


@dataclass
class Tally:
    """Counts of one simulated greedy speculative run (summed over prompts)."""

    depth: int
    steps: int = 0
    proposed: int = 0
    accepted: int = 0
    reached: list[int] = field(default_factory=list)  # step s was attempted (all earlier ones matched)
    correct: list[int] = field(default_factory=list)  # ... and its token matched

    def __post_init__(self):
        self.reached = [0] * self.depth
        self.correct = [0] * self.depth

    def record(self, proposals: list[int], truth: list[int]) -> int:
        """Score one step's proposals against the target's tokens; return the accepted count."""
        n = 0
        self.steps += 1
        self.proposed += len(proposals)
        for s, (p, t) in enumerate(zip(proposals, truth)):
            self.reached[s] += 1
            if p != t:
                break
            self.correct[s] += 1
            n += 1
        self.accepted += n
        return n

    def summary(self) -> dict:
        return {
            "steps": self.steps,
            "draft_tokens": self.proposed,
            "accepted_draft_tokens": self.accepted,
            "acceptance_rate": round(acceptance_rate(self.accepted, self.proposed), 4),
            "mean_acceptance_length": round(mean_acceptance_length(self.accepted, self.steps), 4),
            "per_step_top1": [round(c / r, 4) if r else None for c, r in zip(self.correct, self.reached)],
        }


def crop_to(cache, length: int) -> None:
    """Keep the first `length` cached positions (transformers 5 `crop` takes minus the count to drop)."""
    drop = cache.get_seq_length() - length
    if drop > 0:
        cache.crop(-drop)


def _replay(sequence: torch.Tensor, start: int, depth: int, propose, tally: Tally) -> None:
    """Drive one sequence: `propose(j, count) -> list[int]` drafts the tokens after index j."""
    last = sequence.numel() - 1
    j = start
    while j < last:
        count = min(depth, last - j)
        proposals = propose(j, count)
        n = tally.record(proposals, sequence[j + 1 : j + 1 + count].tolist())
        j += n + 1


@torch.no_grad()
def draft_model_run(draft, sequences: torch.Tensor, prompt_len: int, k: int) -> Tally:
    """A separate draft LM proposing k tokens greedily from the accepted prefix (KV cache cropped)."""
    tally, key = Tally(k), cache_kwarg(draft)
    for seq in sequences:
        cache = new_cache(draft)

        def propose(j: int, count: int) -> list[int]:
            fed = cache.get_seq_length()
            logits = draft(input_ids=seq[fed : j + 1][None], use_cache=True, **{key: cache}).logits
            out = []
            for s in range(count):
                token = int(logits[0, -1].argmax())
                out.append(token)
                if s + 1 < count:
                    logits = draft(input_ids=seq.new_tensor([[token]]), use_cache=True, **{key: cache}).logits
            crop_to(cache, j + 1)  # keep only the accepted prefix; matched drafts are re-fed next step
            return out

        _replay(seq, prompt_len, k, propose, tally)
    return tally


@torch.no_grad()
def medusa_run(heads, features: torch.Tensor, sequences: torch.Tensor, prompt_len: int) -> tuple[Tally, list]:
    """Medusa chains: heads on the feature of the token before the bonus token propose the next K."""
    depth = heads.num_heads
    logits = heads(features)  # [K, N, T, V]
    guesses = logits.argmax(-1)  # head k at t guesses token t + 2 + k
    tally = Tally(depth)
    for i, seq in enumerate(sequences):
        _replay(seq, prompt_len, depth, lambda j, count: guesses[:count, i, j - 1].tolist(), tally)
    top1 = []
    gen = slice(prompt_len - 1, None)
    for k in range(depth):
        g = guesses[k][:, gen][:, : sequences.shape[1] - prompt_len - 1 - k]
        truth = sequences[:, prompt_len + 1 + k :]
        top1.append(round((g == truth).float().mean().item(), 4))
    return tally, top1


@torch.no_grad()
def eagle_run(
    head, features: torch.Tensor, sequences: torch.Tensor, lm_head: torch.Tensor, prompt_len: int, depth: int
) -> Tally:
    """EAGLE-1 chains: true features for the accepted prefix, the head's own features while drafting."""
    tally = Tally(depth)
    for i, seq in enumerate(sequences):
        f = features[i]
        cache = head.new_cache()

        def propose(j: int, count: int) -> list[int]:
            fed = cache.get_seq_length()  # pairs (f_p, x_{p+1}) for p < fed
            pos = torch.arange(fed, j, device=seq.device)[None]
            hidden = head(f[fed:j][None], seq[fed + 1 : j + 1][None], pos, past_key_values=cache)[:, -1:]
            out = []
            for s in range(count):
                token = int((hidden[0, -1] @ lm_head.T).argmax())
                out.append(token)
                if s + 1 < count:
                    hidden = head(hidden, seq.new_tensor([[token]]), seq.new_tensor([[j + s]]), past_key_values=cache)
            crop_to(cache, j)
            return out

        _replay(seq, prompt_len, depth, propose, tally)
    return tally


@torch.no_grad()
def eagle3_run(
    head, captured: torch.Tensor, sequences: torch.Tensor, embed: torch.Tensor, prompt_len: int, depth: int
) -> Tally:
    """EAGLE-3 chains: fc(captured target layers) for the accepted prefix, the head's own outputs while drafting;
    draft-vocabulary argmax mapped to target ids through d2t."""
    tally = Tally(depth)
    for i, seq in enumerate(sequences):
        c = captured[i]
        cache = head.new_cache()

        def propose(j: int, count: int) -> list[int]:
            fed = cache.get_seq_length()  # entries (x_p, token p+1) for p < fed
            pos = torch.arange(fed, j, device=seq.device)[None]
            out = head(c[fed:j][None], embed[seq[fed + 1 : j + 1]][None], pos, cache=cache)[:, -1:]
            proposals = []
            for s in range(count):
                token = int(head.to_target(head.logits(out[0, -1]).argmax()))
                proposals.append(token)
                if s + 1 < count:
                    out = head(out, embed[[token]][None], seq.new_tensor([[j + s]]), cache=cache)
            crop_to(cache, j)
            return proposals

        _replay(seq, prompt_len, depth, propose, tally)
    return tally


@torch.no_grad()
def pard_run(draft, sequences: torch.Tensor, prompt_len: int, k: int, mask_id: int) -> Tally:
    """PARD chains: one forward over the accepted prefix and count - 1 mask tokens proposes `count` tokens at once
    (the last real position and each mask), the mask itself never proposed (no KV cache: each step recomputes)."""
    tally = Tally(k)
    for seq in sequences:

        def propose(j: int, count: int) -> list[int]:
            x = torch.cat([seq[: j + 1], torch.full((count - 1,), mask_id, dtype=seq.dtype)])[None]
            logits = draft(input_ids=x).logits[0, j : j + count]
            logits[:, mask_id] = float("-inf")
            return logits.argmax(-1).tolist()

        _replay(seq, prompt_len, k, propose, tally)
    return tally
