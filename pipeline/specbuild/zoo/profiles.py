"""Zoo profiles: every size, step count and seed that defines a build (so a build is reproducible)."""

from __future__ import annotations

import json
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
class Eagle3Settings:
    """The EAGLE-3 head: which target layers it fuses, its draft vocabulary, and its training-time test."""

    layers: tuple[int, ...]  # target decoder layers captured (0-based), ascending
    draft_vocab: int  # V_d: the most frequent target tokens of the teacher data
    ttt_steps: int  # training-time-test unroll: step k trains on the head's own step k-1 output
    train: Schedule


@dataclass(frozen=True)
class PardSettings:
    """The PARD draft (zoo/distill_pard.py): the distilled draft fine-tuned on `depth` parallel copies (a real prefix
    and up to depth - 1 mask tokens, so it drafts up to `depth` tokens per forward), on the first `teacher_prompts`
    continued rows and `teacher_corpus_blocks` corpus rows of the teacher data (multiples of the teacher's batches,
    128 and 32 rows, so adding the stage later computes the same rows)."""

    depth: int
    teacher_prompts: int
    teacher_corpus_blocks: int
    train: Schedule


@dataclass(frozen=True)
class MtpTargetSettings:
    """A second target with multi-token-prediction layers (`specbuild.zoo.mtp_target`): DeepSeek-V3's architecture
    (MLA attention; dense MLPs) at `shape`, `mtp_layers` MTP modules, trained jointly with DeepSeek-V3's objective
    (main loss + mtp_weight x mean MTP loss) on the same corpus and tokenizer."""

    shape: LlamaShape  # hidden, decoder layers, heads, dense MLP width
    kv_lora_rank: int  # MLA: the cached latent's width
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    mtp_layers: int  # config.json num_nextn_predict_layers (DeepSeek-V3/R1: 1)
    mtp_weight: float  # lambda of the MTP loss (DeepSeek-V3: 0.3, then 0.1)
    train: Schedule
    depth: int = 3  # draft depth of the quality figures (the one layer chained, as MTP-Eagle runs it)


@dataclass(frozen=True)
class Profile:
    name: str
    corpus_max_bytes: int  # cap on the stdlib corpus (files taken in sorted order)
    vocab_size: int
    seq_len: int  # training block length
    target: LlamaShape
    draft: LlamaShape
    target_train: Schedule
    # teacher data: greedy continuations of corpus prompts, generated once by the target
    teacher_prompts: int
    teacher_prompt_len: int
    teacher_new_tokens: int
    teacher_corpus_blocks: int  # plus this many plain corpus blocks (length seq_len)
    draft_train: Schedule
    medusa_heads: int
    medusa_train: Schedule
    eagle_train: Schedule
    eval_prompts: int
    eval_prompt_len: int
    eval_new_tokens: int
    eval_blocks: int  # held-out blocks for the target's validation loss
    eagle3: Eagle3Settings | None = None
    pard: PardSettings | None = None
    mtp_target: MtpTargetSettings | None = None
    draft_k: int = 4  # draft length for the acceptance figures
    eagle_depth: int = 4
    max_position_embeddings: int = 2048
    storage_dtype: str = "float16"
    seed: int = 1234
    notes: str = ""

    def as_dict(self) -> dict:
        """The settings as plain JSON values (tuples as lists), as a manifest records and reads them back."""
        return json.loads(json.dumps(asdict(self)))


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
    # 4 target layers: TensorRT-LLM's default {1, L//2-1, L-4} needs L > 5, so the head records its own: low, mid, top
    eagle3=Eagle3Settings(
        layers=(0, 1, 3), draft_vocab=2048, ttt_steps=3, train=Schedule(steps=360, batch=8, lr=3e-3, warmup=20)
    ),
    pard=PardSettings(
        depth=5, teacher_prompts=384, teacher_corpus_blocks=192, train=Schedule(steps=240, batch=8, lr=1e-3, warmup=20)
    ),
    # ~3M parameters (6 MB float16, the MTP layer's copies of the embedding and lm_head included): the folder stays
    # within its size budget; keys (the 64-wide latent) and values (the 16-wide RoPE key) of different widths
    mtp_target=MtpTargetSettings(
        shape=LlamaShape(hidden=128, layers=4, heads=4, intermediate=344),
        kv_lora_rank=64,
        qk_nope_head_dim=32,
        qk_rope_head_dim=16,
        v_head_dim=32,
        mtp_layers=1,
        mtp_weight=0.3,
        train=Schedule(steps=300, batch=12, lr=3e-3, warmup=30, weight_decay=0.05),
    ),
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
    eagle3=Eagle3Settings(
        layers=(1, 3, 4),
        draft_vocab=2048,
        ttt_steps=3,  # TensorRT-LLM's default for L = 8
        train=Schedule(steps=300, batch=8, lr=2e-3, warmup=20),
    ),
    notes="Built on demand into .cache/zoo/small (not committed); ~30M-parameter target.",
)

# Past the CPU's cache: 97.6 MB of float32 target weights (3x a 32 MiB L3), so a decode step is bound by memory
# bandwidth and verifying several tokens costs little more than one. Same corpus, tokenizer and vocabulary as
# `tiny`; every file of the folder stored float16 stays under 100 MB together.
BASE = Profile(
    name="base",
    corpus_max_bytes=6_000_000,
    vocab_size=4096,
    seq_len=256,
    target=LlamaShape(hidden=384, layers=12, heads=6, intermediate=1024),
    draft=LlamaShape(hidden=128, layers=1, heads=2, intermediate=344),
    target_train=Schedule(steps=200, batch=16, lr=2e-3, warmup=20, weight_decay=0.05),
    teacher_prompts=768,
    teacher_prompt_len=64,
    teacher_new_tokens=128,
    teacher_corpus_blocks=256,
    draft_train=Schedule(steps=600, batch=16, lr=3e-3, warmup=20),
    medusa_heads=4,
    medusa_train=Schedule(steps=400, batch=8, lr=2e-3, warmup=20),
    eagle_train=Schedule(steps=600, batch=12, lr=2e-3, warmup=20),
    eval_prompts=24,
    eval_prompt_len=64,
    eval_new_tokens=96,
    eval_blocks=48,
    eagle3=Eagle3Settings(
        layers=(1, 5, 8),
        draft_vocab=2048,
        ttt_steps=3,  # TensorRT-LLM's default for L = 12
        train=Schedule(steps=480, batch=8, lr=3e-3, warmup=20),
    ),
    # a third of the teacher prompts: the base target's greedy continuations are the stage's main cost
    pard=PardSettings(
        depth=5, teacher_prompts=256, teacher_corpus_blocks=128, train=Schedule(steps=240, batch=8, lr=1e-3, warmup=20)
    ),
    notes="Committed to checkpoints/base; ~24M-parameter target, larger than the CPU's last-level cache.",
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
    eagle3=Eagle3Settings(
        layers=(0, 1), draft_vocab=256, ttt_steps=2, train=Schedule(steps=4, batch=4, lr=3e-3, warmup=1)
    ),
    pard=PardSettings(
        depth=3, teacher_prompts=8, teacher_corpus_blocks=8, train=Schedule(steps=4, batch=4, lr=3e-3, warmup=1)
    ),
    mtp_target=MtpTargetSettings(
        shape=LlamaShape(hidden=32, layers=2, heads=2, intermediate=64),
        kv_lora_rank=16,
        qk_nope_head_dim=8,
        qk_rope_head_dim=8,
        v_head_dim=8,
        mtp_layers=1,
        mtp_weight=0.3,
        train=Schedule(steps=4, batch=4, lr=3e-3, warmup=1),
        depth=2,
    ),
    max_position_embeddings=256,
    notes="Test-only profile: exercises the builder end to end; its models are untrained.",
)

PROFILES = {p.name: p for p in (TINY, BASE, SMALL, MICRO)}


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise UserError(f"unknown zoo profile '{name}'; choose one of {', '.join(PROFILES)}.") from None
