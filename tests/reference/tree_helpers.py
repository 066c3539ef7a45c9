"""Shared helpers for the tree-method tests (Medusa, EAGLE, lookahead): random-init checkpoints saved in their
real layouts, engine folders built with `build_engine`, prompts, and the autoregressive reference."""

from __future__ import annotations

import os
import random
from pathlib import Path

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[2]
SHIPPED_TINY = REPO / "checkpoints" / "tiny"
LIMITS = dict(max_batch_size=8, max_input_len=64, max_seq_len=160, max_num_tokens=1024, max_draft_len=63)


def save_random_llama(folder: Path, *, vocab: int, hidden: int, layers: int, seed: int, init: float = 0.2) -> Path:
    """A random-init LlamaForCausalLM saved as a Hugging Face folder. init 0.2 (not 0.02) gives peaked
    next-token distributions, so greedy argmax ties are far apart."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        initializer_range=init,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    LlamaForCausalLM(cfg).save_pretrained(folder)
    return folder


def save_random_medusa(folder: Path, model_dir: Path, *, num_heads: int, seed: int) -> Path:
    """Random-init Medusa heads (FasterDecoding layout) for the model at model_dir."""
    from transformers import AutoConfig

    from specbuild.heads.medusa import MedusaHeadsModule, save_medusa_heads

    cfg = AutoConfig.from_pretrained(model_dir)
    torch.manual_seed(seed)
    heads = MedusaHeadsModule(cfg.hidden_size, cfg.vocab_size, num_heads=num_heads, num_layers=1)
    return save_medusa_heads(heads, folder, dtype=torch.float32)


def save_random_eagle(folder: Path, model_dir: Path, *, seed: int) -> Path:
    """A random-init EAGLE-1 head (SafeAILab layout) sharing the target's embedding."""
    from transformers import AutoModelForCausalLM

    from specbuild.heads.eagle import EagleHeadModule, save_eagle_head

    target = AutoModelForCausalLM.from_pretrained(model_dir)
    torch.manual_seed(seed)
    head = EagleHeadModule.for_target(target.config)
    with torch.no_grad():
        for name, p in head.named_parameters():
            if p.dim() == 2 and "embed" not in name:
                p.normal_(0.0, 0.2)
    head.copy_embedding_from(target)
    return save_eagle_head(head, folder, dtype=torch.float32)


def make_engine(
    folder: Path,
    model_dir: Path,
    method: str,
    *,
    decoding: dict | None = None,
    extra_dirs: dict | None = None,
    pretrained_extra: dict | None = None,
    dtype: str = "float32",
    **limits,
):
    from specbuild.reference.engine_folder import build_engine, load_engine

    build_engine(
        folder,
        role="target",
        method=method,
        decoding=decoding,
        model_dir=model_dir,
        extra_dirs=extra_dirs,
        dtype=dtype,
        limits={**LIMITS, **limits},
        pretrained_extra=pretrained_extra,
    )
    return load_engine(folder, compute_dtype=dtype)


def prompts(vocab: int, count: int, seed: int, min_len: int = 3, max_len: int = 24) -> list[list[int]]:
    """Random prompts of mixed lengths; every third one repeats a short pattern (n-gram methods get matches)."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        n = rng.randint(min_len, max_len)
        if i % 3 == 0:
            pattern = [rng.randrange(vocab) for _ in range(rng.randint(2, 4))]
            out.append((pattern * n)[:n])
        else:
            out.append([rng.randrange(vocab) for _ in range(n)])
    return out


def requests(prompt_list, max_new_tokens, sampling=None):
    from specbuild.reference.decoder.executor import Request, SamplingConfig

    sampling = sampling or SamplingConfig()
    new = max_new_tokens if isinstance(max_new_tokens, list) else [max_new_tokens] * len(prompt_list)
    return [Request(input_ids=list(p), max_new_tokens=n, sampling=sampling) for p, n in zip(prompt_list, new)]


def mixed_requests(vocab: int, count: int, seed: int, max_new: int = 40):
    """Mixed prompt lengths and output lengths; some requests carry an end id, stop words or bad words, so
    multi-token acceptance meets every stop rule."""
    rng = random.Random(seed + 1)
    out = []
    for i, prompt in enumerate(prompts(vocab, count, seed)):
        (req,) = requests([prompt], rng.randint(1, max_new))
        kind = i % 5
        if kind == 1:
            req.end_id = rng.randrange(vocab)
        elif kind == 2:
            req.stop_words = [[rng.randrange(vocab)], [rng.randrange(vocab), rng.randrange(vocab)]]
        elif kind == 3:
            req.bad_words = [[rng.randrange(vocab)], [rng.randrange(vocab), rng.randrange(vocab)]]
        out.append(req)
    return out


def run(engine, reqs, *, batch_size: int):
    """Outputs of an Executor over `engine` that admits at most `batch_size` requests at a time (requests join
    as others finish: in-flight batching with mixed lengths)."""
    from dataclasses import replace

    from specbuild.reference.decoder.executor import Executor

    ex = Executor(engine)
    ex.limits = replace(ex.limits, max_batch_size=batch_size)
    return ex.run(reqs)


def greedy_reference(model, prompt, n):
    """Greedy decoding with no KV cache at all: each token is the argmax of a fresh forward (independent of the
    executor, the cache and the methods)."""
    tokens = list(prompt)
    for _ in range(n):
        tokens.append(int(model.full_logits(tokens)[-1].argmax()))
    return tokens[len(prompt) :]


def chi_square_pvalue(observed: torch.Tensor, expected: torch.Tensor, min_expected: float = 5.0) -> float:
    """Pearson chi-square goodness of fit (p-value); cells with expected count < min_expected are pooled."""
    observed, expected = observed.double().flatten(), expected.double().flatten()
    small = expected < min_expected
    obs = torch.cat([observed[~small], observed[small].sum()[None]])
    exp = torch.cat([expected[~small], expected[small].sum()[None]])
    keep = exp > 0
    if bool((observed[expected == 0] > 0).any()):
        return 0.0  # a token the target cannot produce was produced
    obs, exp = obs[keep], exp[keep]
    stat = float(((obs - exp) ** 2 / exp).sum())
    df = len(exp) - 1
    return float(
        torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), torch.tensor(stat / 2, dtype=torch.float64))
    )


def exact_second_third_token_distribution(model, prompt, sampling) -> torch.Tensor:
    """P(output[1] = a, output[2] = b) when sampling from the target alone: [V, V], by enumeration over
    output[0] (a fresh forward per context, no cache)."""
    from specbuild.reference.decoder.sampling import probabilities

    def dist(tokens):
        return probabilities(model.full_logits(tokens)[-1], sampling).double()

    p1 = dist(prompt)
    vocab = p1.shape[0]
    joint = torch.zeros(vocab, vocab, dtype=torch.float64)
    for t1 in torch.nonzero(p1).flatten().tolist():
        p2 = dist(prompt + [t1])
        for t2 in torch.nonzero(p2).flatten().tolist():
            joint[t2] += p1[t1] * p2[t2] * dist(prompt + [t1, t2])
    return joint


def second_third_token_histogram(engine, prompt, sampling, samples: int, batch_size: int = 8) -> torch.Tensor:
    """Histogram [V, V] of (output[1], output[2]) over `samples` requests with seeds 0..samples-1. Requests ask
    for 4 tokens so that the step after the prefill drafts a depth-2 tree that can yield both."""
    from dataclasses import replace

    reqs = requests([prompt] * samples, 4)
    for seed, req in enumerate(reqs):
        req.sampling = replace(sampling, seed=seed)
    vocab = engine.vocab_size
    counts = torch.zeros(vocab, vocab, dtype=torch.float64)
    for res in run(engine, reqs, batch_size=batch_size):
        counts[res.output_ids[1], res.output_ids[2]] += 1
    return counts


# ---------------------------------------------------------------- quickly fitted heads (so drafts get accepted)


def teacher_data(model_dir: Path, *, samples: int = 48, prompt_len: int = 6, new_tokens: int = 40, seed: int = 0):
    """Greedy continuations of random prompts by the target, with its final hidden states: (tokens, hidden)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    gen = torch.Generator().manual_seed(seed)
    prompts_ = torch.randint(0, model.config.vocab_size, (samples, prompt_len), generator=gen)
    with torch.no_grad():
        tokens = model.generate(
            prompts_,
            attention_mask=torch.ones_like(prompts_),
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=0,
        )
        hidden = model.model(input_ids=tokens).last_hidden_state
    return model, tokens, hidden


def fit_medusa(folder: Path, model_dir: Path, *, num_heads: int = 3, steps: int = 150, seed: int = 1) -> Path:
    """Medusa heads trained for a few seconds on the target's own greedy text (head k: token t + 2 + k)."""
    from specbuild.heads.medusa import MedusaHeadsModule, save_medusa_heads

    model, tokens, hidden = teacher_data(model_dir, seed=seed)
    torch.manual_seed(seed)
    heads = MedusaHeadsModule(hidden.shape[-1], model.config.vocab_size, num_heads=num_heads, num_layers=1)
    heads.init_from_lm_head(model.lm_head.weight.detach())
    opt = torch.optim.Adam(heads.parameters(), lr=3e-3)
    for _ in range(steps):
        logits = heads(hidden)  # [K, B, T, V]
        loss = sum(
            torch.nn.functional.cross_entropy(logits[k, :, : -(2 + k)].flatten(0, 1), tokens[:, 2 + k :].flatten())
            for k in range(num_heads)
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
    return save_medusa_heads(heads, folder, dtype=torch.float32)


def fit_eagle(folder: Path, model_dir: Path, *, steps: int = 150, seed: int = 1) -> Path:
    """An EAGLE-1 head trained for a few seconds on the target's greedy text: (f_t, x_{t+1}) -> x_{t+2}."""
    from specbuild.heads.eagle import EagleHeadModule, save_eagle_head

    model, tokens, hidden = teacher_data(model_dir, seed=seed)
    torch.manual_seed(seed)
    head = EagleHeadModule.for_target(model.config)
    head.copy_embedding_from(model)
    opt = torch.optim.Adam([p for p in head.parameters() if p.requires_grad], lr=3e-3)
    positions = torch.arange(tokens.shape[1] - 1)[None].expand(tokens.shape[0], -1)
    for _ in range(steps):
        feats = head(hidden[:, :-1], tokens[:, 1:], positions)  # predicts f_{t+1}
        logits = model.lm_head(feats)[:, :-1]
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 2:].flatten())
        loss = loss + torch.nn.functional.smooth_l1_loss(feats[:, :-1], hidden[:, 1:-1])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return save_eagle_head(head, folder, dtype=torch.float32)
