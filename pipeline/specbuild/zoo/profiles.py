"""Zoo profiles: every size, step count and seed that defines a build (so a build is reproducible)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from specbuild.errors import UserError


@dataclass(frozen=True)
class LlamaShape:
    hidden: int
    layers: int
    heads: int
    intermediate: int

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Schedule:
    """An AdamW run: `steps` steps of `batch` sequences, linear warm-up then cosine decay to 10%."""

    steps: int
    batch: int
    lr: float
    warmup: int = 20
    weight_decay: float = 0.0


@dataclass(frozen=True)
class Profile:
    name: str
    corpus_max_bytes: int          # cap on the stdlib corpus (files taken in sorted order)
    vocab_size: int
    seq_len: int                   # training block length
    target: LlamaShape
    draft: LlamaShape
    target_train: Schedule
    # teacher data: greedy continuations of corpus prompts, generated once by the target
    teacher_prompts: int
    teacher_prompt_len: int
    teacher_new_tokens: int
    teacher_corpus_blocks: int     # plus this many plain corpus blocks (length seq_len)
    draft_train: Schedule
    medusa_heads: int
    medusa_train: Schedule
    eagle_train: Schedule
    eval_prompts: int
    eval_prompt_len: int
    eval_new_tokens: int
    eval_blocks: int               # held-out blocks for the target's validation loss
    draft_k: int = 4               # draft length for the acceptance figures
    eagle_depth: int = 4
    max_position_embeddings: int = 2048
    storage_dtype: str = "float16"
    seed: int = 1234
    notes: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


TINY = Profile(
    name="tiny",
    corpus_max_bytes=6_000_000,
    vocab_size=4096,
    seq_len=256,
    target=LlamaShape(hidden=256, layers=4, heads=4, intermediate=688),
    draft=LlamaShape(hidden=128, layers=1, heads=2, intermediate=344),
    target_train=Schedule(steps=320, batch=16, lr=3e-3, warmup=30, weight_decay=0.05),
    teacher_prompts=384,
    teacher_prompt_len=64,
    teacher_new_tokens=128,
    teacher_corpus_blocks=192,
    draft_train=Schedule(steps=400, batch=16, lr=3e-3, warmup=20),
    medusa_heads=4,
    medusa_train=Schedule(steps=300, batch=8, lr=2e-3, warmup=20),
    eagle_train=Schedule(steps=400, batch=12, lr=2e-3, warmup=20),
    eval_prompts=24,
    eval_prompt_len=64,
    eval_new_tokens=96,
    eval_blocks=48,
    notes="Committed to checkpoints/tiny; ~5M-parameter target.",
)

SMALL = Profile(
    name="small",
    corpus_max_bytes=12_000_000,
    vocab_size=4096,
    seq_len=256,
    target=LlamaShape(hidden=512, layers=8, heads=8, intermediate=1376),
    draft=LlamaShape(hidden=128, layers=1, heads=2, intermediate=344),
    target_train=Schedule(steps=200, batch=8, lr=1.5e-3, warmup=20, weight_decay=0.05),
    teacher_prompts=384,
    teacher_prompt_len=64,
    teacher_new_tokens=128,
    teacher_corpus_blocks=192,
    draft_train=Schedule(steps=400, batch=16, lr=3e-3, warmup=20),
    medusa_heads=4,
    medusa_train=Schedule(steps=200, batch=8, lr=1.5e-3, warmup=20),
    eagle_train=Schedule(steps=250, batch=12, lr=1.5e-3, warmup=20),
    eval_prompts=24,
    eval_prompt_len=64,
    eval_new_tokens=96,
    eval_blocks=48,
    notes="Built on demand into .cache/zoo/small (not committed); ~30M-parameter target.",
)

# A few steps of everything on a small corpus slice: keeps the builder's code path tested (< 1 min).
MICRO = Profile(
    name="micro",
    corpus_max_bytes=300_000,
    vocab_size=512,
    seq_len=64,
    target=LlamaShape(hidden=32, layers=2, heads=2, intermediate=64),
    draft=LlamaShape(hidden=16, layers=1, heads=2, intermediate=32),
    target_train=Schedule(steps=6, batch=4, lr=3e-3, warmup=2),
    teacher_prompts=8,
    teacher_prompt_len=16,
    teacher_new_tokens=16,
    teacher_corpus_blocks=8,
    draft_train=Schedule(steps=4, batch=4, lr=3e-3, warmup=1),
    medusa_heads=2,
    medusa_train=Schedule(steps=4, batch=4, lr=3e-3, warmup=1),
    eagle_train=Schedule(steps=4, batch=4, lr=3e-3, warmup=1),
    eval_prompts=2,
    eval_prompt_len=16,
    eval_new_tokens=12,
    eval_blocks=2,
    max_position_embeddings=256,
    notes="Test-only profile: exercises the builder end to end; its models are untrained.",
)

PROFILES = {p.name: p for p in (TINY, SMALL, MICRO)}


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise UserError(f"unknown zoo profile '{name}'; choose one of {', '.join(PROFILES)}.") from None
