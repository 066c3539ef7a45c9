"""What `decode.py` measures: the zoo profile, the prompts, and one reference engine per decoding method."""

from __future__ import annotations

import json
import os
import platform
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "pipeline"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# CPU-sized speculation settings: verification cost grows with the tokens per forward on a CPU, so the trees are
# much smaller than TensorRT-LLM's GPU default (mc_sim_7b_63). Chosen from a sweep on the `small` profile (2 shared
# cores, 1 thread): Medusa 4/5/7/10 nodes, EAGLE-1 chains and 4-9 node trees, EAGLE-2 K=2..3 x D=3..5,
# lookahead (3,3,2)..(4,4,4) were within ~10% of each other; these were at or near the top.
MEDUSA_CHOICES = [[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0], [0, 0, 0, 0]]
EAGLE_CHOICES = [[0], [1], [0, 0], [0, 1], [0, 0, 0], [0, 0, 0, 0]]
EAGLE_LAYERS = 4
EAGLE2_TOP_K, EAGLE2_NODES = 2, 7
LOOKAHEAD = (3, 3, 2)  # (W, N, G): 8 draft tokens per step


@dataclass
class MethodSpec:
    """One decoding method as the benchmark runs it: the recipe method, its runtime options, the engine limits."""

    label: str
    method: str
    decoding: dict = field(default_factory=dict)
    max_draft_len: int = 0
    pretrained_extra: dict = field(default_factory=dict)
    extra_dirs: dict = field(default_factory=dict)  # sub-folder of the profile by name ("medusa", "eagle")
    needs_draft: bool = False

    @property
    def folder_method(self) -> str:
        """The method the engine folder is built with: `method` where the reference runtime has it, else `none` (the
        executor then decodes with `method` directly, see measure.executor)."""
        from specbuild.errors import UserError
        from specbuild.reference.decoder.methods import method_class

        try:
            method_class(self.method)
        except UserError:
            return "none"
        return self.method


def method_specs(profile_dir: Path, k: int) -> list[MethodSpec]:
    from specbuild.methods.eagle.decoder import dynamic_tree_size
    from specbuild.methods.lookahead import lookahead_max_draft_len

    medusa_cfg = json.loads((profile_dir / "medusa" / "config.json").read_text())
    medusa_choices = [c for c in MEDUSA_CHOICES if len(c) <= medusa_cfg["medusa_num_heads"]]
    w, n, g = LOOKAHEAD
    top_k, eagle2_nodes = EAGLE2_TOP_K, EAGLE2_NODES
    return [
        MethodSpec("autoregressive", "none"),
        MethodSpec("draft_target", "draft_target", {"num_draft_tokens": k}, k, needs_draft=True),
        MethodSpec("prompt_lookup", "prompt_lookup", {"max_draft_len": k, "max_matching_ngram_size": 3}, k),
        MethodSpec(
            "medusa",
            "medusa",
            {"medusa_choices": medusa_choices},
            len(medusa_choices),
            {"num_medusa_heads": medusa_cfg["medusa_num_heads"], "num_medusa_layers": medusa_cfg["medusa_num_layers"]},
            {"medusa": "medusa"},
        ),
        MethodSpec(
            "eagle1",
            "eagle",
            {"eagle_choices": EAGLE_CHOICES},
            len(EAGLE_CHOICES),
            {"num_eagle_layers": EAGLE_LAYERS, "max_non_leaves_per_layer": 10},
            {"eagle": "eagle"},
        ),
        MethodSpec(
            "eagle2",
            "eagle",
            {"eagle_use_dynamic_tree": True, "eagle_dynamic_tree_max_top_k": top_k},
            dynamic_tree_size(top_k, EAGLE_LAYERS, eagle2_nodes),
            {"num_eagle_layers": EAGLE_LAYERS, "max_non_leaves_per_layer": 10},
            {"eagle": "eagle"},
        ),
        MethodSpec(
            "lookahead",
            "lookahead",
            {"lookahead_window_size": w, "lookahead_ngram_size": n, "lookahead_verification_set_size": g},
            lookahead_max_draft_len(w, n, g),
        ),
        # EAGLE-3 as TensorRT-LLM runs it by default: a chain of max_draft_len drafts; the capture layers are the
        # ones the head's config.json records (the zoo's 4-layer target is below TensorRT-LLM's default's minimum)
        *(
            [
                MethodSpec(
                    "eagle3", "eagle3", {"max_draft_len": EAGLE_LAYERS}, EAGLE_LAYERS, extra_dirs={"eagle3": "eagle3"}
                )
            ]
            if (profile_dir / "eagle3").is_dir()
            else []
        ),
    ]


def profile_dir(name: str, progress) -> Path:
    from specbuild.zoo import ensure_profile

    return Path(ensure_profile(name, progress=progress))


def load_prompts(profile: Path, count: int, length: int) -> list[list[int]]:
    """`count` prompts of `length` tokens: the openings of held-out stdlib documents (never trained on)."""
    from transformers import AutoTokenizer

    from specbuild.zoo.corpus import load_corpus
    from specbuild.zoo.profiles import get_profile

    manifest = json.loads((profile / "manifest.json").read_text())
    corpus = load_corpus(get_profile(manifest["profile"]).corpus_max_bytes)
    tokenizer = AutoTokenizer.from_pretrained(profile / "tokenizer")
    prompts = []
    for doc in corpus.heldout:
        ids = tokenizer(doc, add_special_tokens=True)["input_ids"]
        if len(ids) >= length:
            prompts.append(ids[:length])
            if len(prompts) == count:
                return prompts
    raise SystemExit(f"only {len(prompts)} held-out documents have {length} tokens; ask for fewer or shorter prompts")


def build_engines(specs: list[MethodSpec], profile: Path, out: Path, limits: dict) -> dict:
    """One reference engine folder per method (weights hard-linked), loaded; plus the draft engine."""
    from specbuild.reference.engine_folder import build_engine, load_engine

    engines = {}
    for spec in specs:
        folder = out / spec.label
        build_engine(
            folder,
            role="target",
            method=spec.folder_method,
            decoding=spec.decoding,
            model_dir=profile / "target",
            tokenizer_dir=profile / "tokenizer",
            extra_dirs={name: profile / sub for name, sub in spec.extra_dirs.items()},
            dtype="float16",
            limits={**limits, "max_draft_len": spec.max_draft_len},
            pretrained_extra=spec.pretrained_extra,
        )
        engines[spec.label] = load_engine(folder)
    build_engine(
        out / "draft",
        role="draft",
        method="draft_target",
        model_dir=profile / "draft",
        tokenizer_dir=profile / "tokenizer",
        dtype="float16",
        limits={**limits, "max_draft_len": 0},
    )
    engines["draft"] = load_engine(out / "draft")
    return engines


def machine() -> dict:
    import torch
    import transformers

    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "logical_cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "platform": platform.platform(),
        "load_average_at_start": list(os.getloadavg()),
    }


def logger(tag: str):
    """A bench's progress line on stderr: `[tag HH:MM:SS] message`."""
    import time

    def log(message: str) -> None:
        print(f"[{tag} {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    return log


def emit(report: dict, out) -> None:
    """Print a bench's JSON report to stdout and, with `out` (--out), write it there too."""
    text = json.dumps(report, indent=2)
    print(text)
    if out:
        Path(out).write_text(text + "\n")
