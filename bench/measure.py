"""Timed decoding runs: our executor (any method, any concurrency) and Hugging Face transformers' `generate`."""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace


@dataclass
class Run:
    """Timed decoding of some prompts (sums when several runs are added together)."""

    seconds: float = 0.0
    tokens: int = 0  # generated tokens
    target_forwards: int = 0  # forwards of the target network (prefills included)
    accepted_draft_tokens: int = 0
    steps: int = 0  # verification steps (target forwards after prefill) summed over requests
    outputs: list[list[int]] = field(default_factory=list)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0

    @property
    def forwards_per_token(self) -> float:
        return self.target_forwards / self.tokens if self.tokens else 0.0

    def add(self, other: "Run") -> "Run":
        self.seconds += other.seconds
        self.tokens += other.tokens
        self.target_forwards += other.target_forwards
        self.accepted_draft_tokens += other.accepted_draft_tokens
        self.steps += other.steps
        self.outputs += other.outputs
        return self


@contextmanager
def count_calls(module):
    """Count forward calls of a torch module (a forward pre-hook)."""
    counter = [0]
    handle = module.register_forward_pre_hook(lambda *_: counter.__setitem__(0, counter[0] + 1))
    try:
        yield counter
    finally:
        handle.remove()


def executor(engine, concurrency: int, draft_engine=None, method: str | None = None):
    """Our Executor over `engine` admitting at most `concurrency` requests at a time (in-flight batching).

    method: decode with this reference method instead of the one the engine folder names (for methods the engine
    folder format does not know yet, e.g. `eagle3`, whose engines are built as method `none` with the head folder)."""
    from specbuild.reference.decoder.executor import Executor, _Group
    from specbuild.reference.decoder.methods import method_class

    ex = Executor(engine, draft_engine)
    ex.limits = replace(ex.limits, max_batch_size=concurrency)
    if method is not None and type(ex._groups["engine"].method) is not method_class(method):
        ex._groups["engine"] = _Group(method_class(method)(engine, draft_engine))
        ex.method_name = method
    return ex


def run_ours(ex, engine, prompts, new_tokens: int) -> Run:
    """All prompts through an Executor (greedy, no end id: exactly new_tokens tokens each)."""
    import torch

    from specbuild.reference.decoder.executor import Request

    requests = [Request(input_ids=list(p), max_new_tokens=new_tokens) for p in prompts]
    forwards_before = engine.model.forwards
    with torch.inference_mode():
        start = time.perf_counter()
        results = ex.run(requests)
        seconds = time.perf_counter() - start
    return Run(
        seconds=seconds,
        tokens=sum(len(r.output_ids) for r in results),
        target_forwards=engine.model.forwards - forwards_before,
        accepted_draft_tokens=sum(r.stats.total_accepted_draft_tokens for r in results),
        steps=sum(r.stats.steps for r in results),
        outputs=[r.output_ids for r in results],
    )


def run_transformers(model, prompts, new_tokens: int, **generate_kwargs) -> Run:
    """Hugging Face `generate`, greedy, one prompt at a time (assisted generation supports batch 1 only)."""
    import torch

    outputs, tokens = [], 0
    with torch.inference_mode(), count_calls(model.model) as forwards:
        start = time.perf_counter()
        for prompt in prompts:
            ids = torch.tensor([prompt])
            out = model.generate(
                ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, do_sample=False, **generate_kwargs
            )
            outputs.append(out[0, len(prompt) :].tolist())
            tokens += len(outputs[-1])
        seconds = time.perf_counter() - start
    return Run(seconds=seconds, tokens=tokens, target_forwards=forwards[0], outputs=outputs)
