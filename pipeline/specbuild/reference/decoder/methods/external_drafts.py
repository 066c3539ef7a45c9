"""External draft tokens (the Triton BLS path; TensorRT-LLM's `draft_tokens_external` mode).

The request arrives with drafts made elsewhere (a draft model, an n-gram lookup) as `draft_tokens`
(`draft_input_ids`), optionally with their `draft_logits`. Its prefill is one target forward over prompt + drafts
that verifies them: the request yields the accepted drafts plus one token. If it may generate more, it goes on
autoregressively.
"""

from __future__ import annotations

import torch

from specbuild.facts.engine_facts import SpecMode
from specbuild.reference.decoder.batch import Batch
from specbuild.reference.decoder.methods import StepOutput
from specbuild.reference.decoder.methods.autoregressive import AutoregressiveDecoder
from specbuild.reference.decoder.verify import verify_chain


class ExternalDraftsDecoder(AutoregressiveDecoder):
    name = "external_drafts"
    engine_mode = SpecMode.DRAFT_TOKENS_EXTERNAL
    step_is_prefill = False  # its prefill verifies the request's drafts

    def prefill(self, batch: Batch) -> list[StepOutput]:
        drafts = [seq.request.draft_tokens[: seq.draft_budget(len(seq.request.draft_tokens))] for seq in batch.seqs]
        out = batch.feed("target", self.target, drafts, logits="none")

        outputs, keep = [], []
        for r, seq in enumerate(batch.seqs):
            k = len(drafts[r])
            target_logits = self.target.lm_logits(out.hidden_tail(r, k + 1))
            draft_probs = None
            if seq.request.draft_logits is not None:
                draft_probs = seq.probs(torch.as_tensor(seq.request.draft_logits, dtype=torch.float32)[:k], drafts[r])
            acceptance = verify_chain(seq, target_logits, drafts[r], draft_probs)
            outputs.append(StepOutput.of(acceptance, drafted=k))
            keep.append(out.n_new[r] - k + len(acceptance.nodes))  # the prompt and the accepted drafts
        batch.caches["target"].commit_prefix(keep)
        return outputs


DECODER = ExternalDraftsDecoder
