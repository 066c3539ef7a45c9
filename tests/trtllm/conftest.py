"""Fixtures for the TensorRT-LLM runtime tests: the test double on PATH/PYTHONPATH, tiny HF folders, recipes.

Everything runs on CPU: `trtllm-build`, `nvidia-smi` and the `tensorrt_llm` package are the doubles under
tests/doubles, which enforce upstream's contract (see tests/doubles/README.md).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from trtllm_helpers import DOUBLES, PIPELINE

TARGET_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 512,
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "intermediate_size": 128,
    "max_position_embeddings": 1024,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "torch_dtype": "float32",
}
# A complete tokenizers file (the recipe check loads it with the tokenizers library)
TOKENIZER = {
    "version": "1.0",
    "truncation": None,
    "padding": None,
    "added_tokens": [
        {
            "id": 2,
            "content": "<s>",
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
    ],
    "normalizer": None,
    "pre_tokenizer": None,
    "post_processor": None,
    "decoder": None,
    "model": {
        "type": "BPE",
        "dropout": None,
        "unk_token": None,
        "continuing_subword_prefix": None,
        "end_of_word_suffix": None,
        "fuse_unk": False,
        "byte_fallback": False,
        "ignore_merges": False,
        "vocab": {"a": 0, "b": 1, "<s>": 2},
        "merges": [],
    },
}


def _launcher(path: Path, body: str) -> None:
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(0o755)


@dataclass
class Machine:
    """The fake GPU machine: where the doubles live and how to tune them."""

    root: Path
    bin: Path
    monkeypatch: pytest.MonkeyPatch

    def set(self, name: str, value: str | None) -> None:
        if value is None:
            self.monkeypatch.delenv(name, raising=False)
        else:
            self.monkeypatch.setenv(name, value)

    def add_tool(self, name: str, script: str = "import sys; sys.exit(0)\n") -> Path:
        path = self.bin / name
        _launcher(path, script)
        return path


@pytest.fixture
def machine(tmp_path, monkeypatch) -> Iterator[Machine]:
    """A GPU machine with the TensorRT-LLM double: one H200, trtllm-build and nvidia-smi on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _launcher(bin_dir / "trtllm-build", "from tensorrt_llm.commands.build import main\nmain()\n")
    _launcher(
        bin_dir / "nvidia-smi",
        f"import runpy\nrunpy.run_path({str(DOUBLES / 'nvidia_smi.py')!r}, run_name='__main__')\n",
    )
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin")
    monkeypatch.setenv("PYTHONPATH", f"{PIPELINE}{os.pathsep}{DOUBLES}")
    monkeypatch.setenv("SPECBUILD_TRTLLM_DOUBLE", "1")
    monkeypatch.setenv("SPECBUILD_DOUBLE_GPUS", "NVIDIA H200,9.0")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for knob in (
        "SPECBUILD_DOUBLE_TRTLLM_VERSION",
        "SPECBUILD_DOUBLE_FAULT",
        "SPECBUILD_DOUBLE_DROP_FLAGS",
        "SPECBUILD_DOUBLE_BUILD_SECONDS",
        "SPECBUILD_DOUBLE_PID_FILE",
        "SPECBUILD_DOUBLE_CALL_LOG",
    ):
        monkeypatch.delenv(knob, raising=False)
    monkeypatch.syspath_prepend(str(DOUBLES))  # find_spec("tensorrt_llm") in this process sees the double
    monkeypatch.chdir(tmp_path)
    yield Machine(tmp_path, bin_dir, monkeypatch)
    # a test that imported the double in this process (tensorrt_llm.__version__, its llm_args) leaves it in
    # sys.modules, where find_spec("tensorrt_llm") would see it in later tests of the same worker: a machine without
    # TensorRT-LLM must look like one
    for name in [m for m in sys.modules if m == "tensorrt_llm" or m.startswith("tensorrt_llm.")]:
        del sys.modules[name]


@pytest.fixture
def models(tmp_path) -> Path:
    """Tiny Hugging Face folders (configs and tokenizer only: the double reads configs, never weights)."""
    root = tmp_path / "models"
    for name in ("target", "draft"):
        d = root / name
        d.mkdir(parents=True)
        (d / "config.json").write_text(json.dumps(TARGET_CONFIG))
        (d / "model.safetensors").write_bytes(b"")  # present for `check`; the double never reads weights
        (d / "tokenizer.json").write_text(json.dumps(TOKENIZER))
    (root / "medusa").mkdir()
    # FasterDecoding layout: the key is medusa_num_heads (models/medusa/config.py reads num_medusa_heads).
    (root / "medusa" / "config.json").write_text(
        json.dumps({"medusa_num_heads": 3, "medusa_num_layers": 1, "hidden_size": 64, "vocab_size": 512})
    )
    # 3 heads of the target's width and vocabulary: the double's converter reads their names as load_medusa_hf does
    from safetensors.numpy import save_file
    import numpy as np

    save_file(
        {
            name: np.zeros(shape, np.float16)
            for h in range(3)
            for name, shape in (
                (f"{h}.0.linear.weight", (64, 64)),
                (f"{h}.0.linear.bias", (64,)),
                (f"{h}.1.weight", (512, 64)),
            )
        },
        str(root / "medusa" / "medusa_lm_head.safetensors"),
    )
    (root / "eagle").mkdir()
    (root / "eagle" / "pytorch_model.bin").write_bytes(b"")
    (root / "eagle" / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "hidden_size": 64,
                "vocab_size": 512,
                "num_hidden_layers": 1,
                "num_attention_heads": 4,
                "num_key_value_heads": 4,
                "intermediate_size": 128,
                "rms_norm_eps": 1e-5,
                "max_position_embeddings": 1024,
            }
        )
    )
    return root


SPECULATION = {
    "none": {"method": "none"},
    "medusa": {
        "method": "medusa",
        "checkpoint": "models/medusa",
        "num_heads": 3,
        "max_draft_len": 20,
        "choices": [[0], [0, 0], [1], [0, 0, 0], [0, 1]],
    },
    "eagle": {"method": "eagle", "checkpoint": "models/eagle"},
    "draft_target": {
        "method": "draft_target",
        "checkpoint": "models/draft",
        "num_draft_tokens": 4,
        "max_draft_len": 6,
        "use_draft_logits": True,
    },
    "prompt_lookup": {"method": "prompt_lookup", "max_draft_len": 5, "max_matching_ngram_size": 2},
    "lookahead": {"method": "lookahead", "window_size": 4, "ngram_size": 4, "verification_set_size": 4},
}


@pytest.fixture
def write_recipe(tmp_path, models):
    """write_recipe(method, name=None, **sections) -> recipe path (JSON is YAML)."""

    def write(method: str, name: str | None = None, **sections) -> Path:
        recipe = {
            "name": name or method.replace("_", "-"),
            "runtime": "tensorrt-llm",
            "model": {"checkpoint": "models/target"},
            "speculation": dict(SPECULATION[method]),
            "build": {"max_batch_size": 4, "max_input_len": 128, "max_seq_len": 256},
            "validation": {"max_tokens": 16},
        }
        for key, value in sections.items():
            recipe[key] = {**recipe.get(key, {}), **value} if isinstance(value, dict) else value
        path = tmp_path / f"{recipe['name']}.yaml"
        path.write_text(json.dumps(recipe, indent=2))
        return path

    return write


@dataclass
class Compiled:
    engines: dict[str, Path]
    layout: object
    plan: object
    recipe: object
    progress: list[str]

    def engine_config(self, role: str) -> dict:
        return json.loads((self.layout.engine(role) / "config.json").read_text())

    def checkpoint_config(self, role: str) -> dict:
        return json.loads((self.layout.checkpoint(role) / "config.json").read_text())


@pytest.fixture
def compile_engines(tmp_path):
    """Plan a recipe and run its engine steps through the doubles (what `specbuild compile` does first)."""
    from specbuild.plan import Layout
    from specbuild.planning import plan_build
    from specbuild.recipe import load_recipe
    from specbuild.runtimes import runtime_for
    from specbuild.runtimes.base import BuildOptions
    from specbuild.runtimes.build import resolve_build

    def load(recipe_path: Path, examples: Path | None = None):
        return load_recipe(recipe_path, options=BuildOptions(trtllm_examples=str(examples) if examples else None))

    def run(recipe_path: Path, examples: Path | None = None, mutate=None) -> Compiled:
        options = BuildOptions(trtllm_examples=str(examples) if examples else None)
        recipe = load_recipe(recipe_path, options=options)
        layout = Layout(tmp_path / "engines", tmp_path / "triton_repo", tmp_path / "reports", recipe.name)
        plan = plan_build(resolve_build(recipe, options), layout)
        if mutate is not None:
            mutate(plan)
        progress: list[str] = []
        engines = runtime_for(recipe).build_engines(plan.engine_steps, recipe, layout, progress=progress.append)
        return Compiled(engines, layout, plan, recipe, progress)

    run.load = load
    return run


# --- the llm-api flavour -----------------------------------------------------------------------------------------

LLMAPI_SPEC = {
    "draft_target": {"method": "draft_target", "checkpoint": "models/draft", "num_draft_tokens": 4},
    "prompt_lookup": {"method": "prompt_lookup", "max_draft_len": 3, "max_matching_ngram_size": 4},
    "eagle3": {"method": "eagle3", "checkpoint": "models/eagle3", "max_draft_len": 3, "layers_to_capture": [0, 1]},
    "mtp": {"method": "mtp", "num_nextn_predict_layers": 1},
    "none": {"method": "none"},
}


@pytest.fixture
def llmapi_recipe(machine, models, tmp_path):
    (models / "eagle3").mkdir()
    (models / "eagle3" / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLMEagle3"],
                "model_type": "llama",
                "hidden_size": 64,
                "vocab_size": 512,
                "draft_vocab_size": 256,
                "num_hidden_layers": 1,
                "num_attention_heads": 4,
                "num_key_value_heads": 4,
                "intermediate_size": 128,
                "rms_norm_eps": 1e-5,
                "max_position_embeddings": 1024,
            }
        )
    )
    (models / "eagle3" / "model.safetensors").write_bytes(b"")
    mtp = dict(json.loads((models / "target" / "config.json").read_text()), num_nextn_predict_layers=1)
    (models / "mtp-target").mkdir()
    (models / "mtp-target" / "config.json").write_text(json.dumps(mtp))
    (models / "mtp-target" / "tokenizer.json").write_text((models / "target" / "tokenizer.json").read_text())
    (models / "mtp-target" / "model.safetensors").write_bytes(b"")

    def write(method: str, release: str = "1.2", **sections) -> Path:
        recipe = {
            "name": f"llmapi-{method.replace('_', '-')}",
            "runtime": "tensorrt-llm",
            "flavour": "llm-api",
            "model": {"checkpoint": "models/mtp-target" if method == "mtp" else "models/target", "dtype": "bfloat16"},
            "speculation": dict(LLMAPI_SPEC[method]),
            "triton": {"streaming": True},
            "llm_api": {"release": release},
            "validation": {"max_tokens": 16},
        }
        for key, value in sections.items():
            recipe[key] = {**recipe.get(key, {}), **value}
        path = tmp_path / f"{recipe['name']}-{release}.yaml"
        path.write_text(json.dumps(recipe))
        return path

    return write
