"""A checkpoint folder of the wrong kind (an EAGLE-1 head given to eagle3, Medusa heads as the target, a draft whose
weights lack decoder layers its config.json names) is refused by `specbuild check` at the field that names it, from
the tensor names alone (specbuild/checkpoints/checkpoint_tensors.py); the reference runtime refuses such weights when it loads
them instead of letting transformers initialise the missing tensors at random."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from specbuild.checkpoints import checkpoint_tensors as ct
from specbuild.errors import RecipeError, UserError
from specbuild.recipe.loader import load_recipe

ROOT = Path(__file__).resolve().parents[2]
ZOO = ROOT / "checkpoints" / "tiny"

SPEC = {  # the smallest valid speculation section per method over the tiny zoo
    "eagle": {"method": "eagle"},
    "medusa": {"method": "medusa", "num_heads": 4},
    "eagle3": {"method": "eagle3", "max_draft_len": 4, "layers_to_capture": [0, 1, 3]},
    "draft_target": {"method": "draft_target"},
}
FOLDER_OF = {"eagle": "eagle", "medusa": "medusa", "eagle3": "eagle3", "draft_target": "draft"}
LABEL_OF = {
    "eagle": "an EAGLE-1 head",
    "medusa": "Medusa heads",
    "eagle3": "an EAGLE-3 head",
    "draft": "a causal language model",
    "target": "a causal language model",
}


def _recipe(tmp_path: Path, model: Path, speculation: dict | None = None, method: str | None = None) -> Path:
    recipe = {
        "name": "layouts",
        "runtime": "reference",
        "model": {"checkpoint": str(model), "tokenizer": str(ZOO / "tokenizer")},
    }
    if speculation is not None:
        recipe["speculation"] = speculation
    if method == "eagle3":
        recipe["flavour"] = "llm-api"
    path = tmp_path / "recipe.yaml"
    path.write_text(json.dumps(recipe))
    return path


def _problems(path: Path) -> str:
    with pytest.raises(RecipeError) as caught:
        load_recipe(path)
    return str(caught.value)


@pytest.mark.parametrize("method", sorted(SPEC))
def test_each_method_takes_its_own_folder(method, tmp_path):
    spec = dict(SPEC[method], checkpoint=str(ZOO / FOLDER_OF[method]))
    load_recipe(_recipe(tmp_path, ZOO / "target", spec, method))


@pytest.mark.parametrize(
    "method,folder", [(m, f) for m in sorted(SPEC) for f in ("eagle", "medusa", "eagle3", "draft") if f != FOLDER_OF[m]]
)
def test_a_folder_of_another_kind_is_named_as_what_it_holds(method, folder, tmp_path):
    spec = dict(SPEC[method], checkpoint=str(ZOO / folder))
    text = _problems(_recipe(tmp_path, ZOO / "target", spec, method))
    lines = [line for line in text.splitlines() if "speculation.checkpoint:" in line and LABEL_OF[folder] in line]
    assert lines, text
    assert LABEL_OF[FOLDER_OF[method]] in lines[0], lines[0]  # says what was wanted, too


@pytest.mark.parametrize("folder", ["eagle", "medusa", "eagle3"])
def test_a_head_as_the_target_is_refused(folder, tmp_path):
    text = _problems(_recipe(tmp_path, ZOO / folder))
    assert "model.checkpoint:" in text and f"holds {LABEL_OF[folder]}" in text and "not a causal language model" in text


def test_medusa_heads_of_another_width_are_refused(tmp_path):
    heads = tmp_path / "medusa128"
    heads.mkdir()
    config = json.loads((ZOO / "medusa" / "config.json").read_text())
    (heads / "config.json").write_text(json.dumps({**config, "hidden_size": 128}))
    tensors = {}
    for h in range(4):
        tensors[f"{h}.0.linear.weight"] = np.zeros((128, 128), np.float16)
        tensors[f"{h}.0.linear.bias"] = np.zeros(128, np.float16)
        tensors[f"{h}.1.weight"] = np.zeros((4096, 128), np.float16)
    save_file(tensors, str(heads / "medusa_lm_head.safetensors"))
    text = _problems(_recipe(tmp_path, ZOO / "target", {"method": "medusa", "num_heads": 4, "checkpoint": str(heads)}))
    assert "speculation.checkpoint: each Medusa head reads 128-wide target hidden states (1.1.weight" not in text
    assert (
        "speculation.checkpoint: each Medusa head reads 128-wide target hidden states (0.1.weight [4096, 128])" in text
    )  # the weights say it, whatever config.json says
    assert "the target's hidden_size is 256" in text and "use a head trained on this target" in text
    from transformers import AutoConfig

    from specbuild.heads.medusa import load_medusa_heads

    class Target:  # what the loader reads of the target model
        config = AutoConfig.from_pretrained(ZOO / "target")

    with pytest.raises(UserError, match="map 128-wide hidden states onto 4096 tokens"):
        load_medusa_heads(heads, target_model=Target())
    assert load_medusa_heads(ZOO / "medusa", target_model=Target()).hidden_size == 256


def test_an_eagle1_head_in_safetensors_is_taken_as_tensorrt_llm_takes_it(tmp_path):
    import torch
    from safetensors.torch import save_file as save_torch

    from specbuild.heads.eagle import load_eagle_head

    head = tmp_path / "eagle"
    head.mkdir()
    shutil.copy(ZOO / "eagle" / "config.json", head)
    state = torch.load(ZOO / "eagle" / "pytorch_model.bin", weights_only=True)
    save_torch({k: v.contiguous() for k, v in state.items()}, str(head / "model.safetensors"))
    load_recipe(_recipe(tmp_path, ZOO / "target", {"method": "eagle", "checkpoint": str(head)}))
    loaded, original = load_eagle_head(head), load_eagle_head(ZOO / "eagle")
    assert torch.equal(loaded.fc.weight, original.fc.weight)


@pytest.mark.parametrize("layers, refused", [([0, 1, 3], False), ([0, 1], True), ([0, 1, 2, 3], True)])
def test_eagle3_captures_as_many_layers_as_its_fc_fuses(layers, refused, tmp_path):
    spec = dict(SPEC["eagle3"], checkpoint=str(ZOO / "eagle3"), layers_to_capture=layers)
    path = _recipe(tmp_path, ZOO / "target", spec, "eagle3")
    if refused:
        text = _problems(path)
        assert "speculation.layers_to_capture:" in text and "the head fuses 3 target layer(s)" in text
        assert "its config.json names [0, 1, 3]" in text
    else:
        load_recipe(path)


def _mtp_target(tmp_path: Path, names: list[str]) -> Path:
    folder = tmp_path / "mtp-target"
    folder.mkdir()
    config = json.loads((ZOO / "target" / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "num_nextn_predict_layers": 1}))
    for f in (ZOO / "tokenizer").iterdir():
        shutil.copy(f, folder)
    save_file(
        {n: np.zeros(2, np.float32) for n in names + ["model.embed_tokens.weight", "lm_head.weight"]},
        str(folder / "model.safetensors"),
    )
    return folder


@pytest.mark.parametrize(
    "extra, refused", [([], True), (["model.layers.4.eh_proj.weight"], False), (["mtp.layers.0.mlp.w"], False)]
)
def test_mtp_needs_its_layers_in_the_weights_not_only_in_config_json(extra, refused, tmp_path):
    names = [f"model.layers.{i}.mlp.w" for i in range(4)] + extra
    recipe = {
        "name": "mtp",
        "runtime": "tensorrt-llm",
        "flavour": "llm-api",
        "model": {"checkpoint": str(_mtp_target(tmp_path, names)), "dtype": "bfloat16"},
        "speculation": {"method": "mtp"},
    }
    path = tmp_path / "mtp.yaml"
    path.write_text(json.dumps(recipe))
    if refused:
        assert "names 1 MTP layer(s) but the weights hold none (no layer 4 or later" in _problems(path)
    else:
        load_recipe(path)


def _lacking_layers(tmp_path: Path, n_layers: int) -> Path:
    folder = tmp_path / "short"
    shutil.copytree(ZOO / "target", folder)
    config = json.loads((folder / "config.json").read_text())
    config["num_hidden_layers"] = n_layers
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_a_model_whose_weights_lack_layers_of_its_config_is_refused(tmp_path):
    text = _problems(_recipe(tmp_path, _lacking_layers(tmp_path, 7)))
    assert "model.checkpoint:" in text and "has 7 decoder layers" in text and "no tensors of layers 4-6" in text, text


def test_a_draft_whose_weights_lack_layers_is_refused_with_exit_2(tmp_path):
    draft = tmp_path / "draft"
    shutil.copytree(ZOO / "draft", draft)
    config = json.loads((draft / "config.json").read_text())
    config["num_hidden_layers"] = 2
    (draft / "config.json").write_text(json.dumps(config))
    path = _recipe(tmp_path, ZOO / "target", {"method": "draft_target", "checkpoint": str(draft)})
    out = subprocess.run(
        [sys.executable, "-m", "specbuild.cli", "check", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=str(ROOT / "pipeline")),
    )
    assert out.returncode == 2 and "speculation.checkpoint:" in out.stderr and "no tensors of layer 1" in out.stderr
    assert "Traceback" not in out.stderr


def test_an_eagle1_head_whose_config_counts_more_layers_than_it_holds_is_refused(tmp_path):
    head = tmp_path / "eagle"
    shutil.copytree(ZOO / "eagle", head)
    config = json.loads((head / "config.json").read_text())
    (head / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 2}))
    text = _problems(_recipe(tmp_path, ZOO / "target", {"method": "eagle", "checkpoint": str(head)}))
    assert (
        "speculation.checkpoint:" in text and "has 2 decoder layers but the weights hold no tensors of layer 1" in text
    )


def test_the_reference_runtime_refuses_weights_missing_from_a_checkpoint(tmp_path):
    from specbuild.reference.decoder.model import CausalLM

    with pytest.raises(UserError, match=r"lack \d+ tensor\(s\).*model\.layers\.4\."):
        CausalLM.from_pretrained(_lacking_layers(tmp_path, 6))
    with pytest.raises(UserError, match=r"lm_head\.weight"):
        CausalLM.from_pretrained(ZOO / "eagle")  # an EAGLE-1 head's config.json says LlamaForCausalLM


# -- reading the names: what is read, what is not ----------------------------------------------------------------


def test_names_come_from_headers_shards_and_zip_pickles():
    assert ct.layout(ct.tensor_names(ZOO / "target")) == ct.CAUSAL_LM  # safetensors header
    assert ct.layout(ct.tensor_names(ZOO / "eagle")) == ct.EAGLE1  # pytorch_model.bin, memory-mapped
    assert ct.layout(ct.tensor_names(ZOO / "medusa", ct.MEDUSA.files)) == ct.MEDUSA
    assert ct.tensor_names(ZOO / "medusa", ct.EAGLE3.files) is None  # the file an EAGLE-3 loader reads is absent


def test_pytorch_zip_files_are_read_without_torch_and_without_running_their_code(tmp_path):
    import pickle
    import zipfile

    import torch

    state = {
        "a": torch.zeros(3, 4),
        "b": torch.nn.Parameter(torch.ones(2, dtype=torch.bfloat16)),
        "c": torch.arange(5),
        "d": torch.zeros(()),
    }
    torch.save(state, tmp_path / "weights.bin")
    assert ct.tensor_shapes(tmp_path, ("weights.bin",)) == {k: tuple(v.shape) for k, v in state.items()}
    hostile = tmp_path / "hostile"
    hostile.mkdir()

    class Boom:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'ran'}",))

    with zipfile.ZipFile(hostile / "pytorch_model.bin", "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps({"w": Boom()}, protocol=2))
    assert ct.tensor_names(hostile) is None and not (tmp_path / "ran").exists()
    code = (
        "import sys; from specbuild.checkpoints import checkpoint_tensors as ct; ct.tensor_names(sys.argv[1]); "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(ZOO / "eagle")],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT / "pipeline")),
        timeout=60,
    )
    assert out.stdout.strip() == "False", out.stderr  # `specbuild check` stays quick: no torch import


def test_a_shard_index_names_every_tensor(tmp_path):
    save_file({"model.layers.0.w": np.zeros(2, np.float32)}, str(tmp_path / "model-00001-of-00002.safetensors"))
    index = {
        "weight_map": {
            "model.embed_tokens.weight": "model-00002-of-00002.safetensors",
            "model.layers.0.w": "model-00001-of-00002.safetensors",
        }
    }
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    assert ct.tensor_names(tmp_path) == {"model.embed_tokens.weight", "model.layers.0.w"}


def test_a_shard_the_index_names_but_the_folder_lacks_is_refused(tmp_path):
    folder = tmp_path / "sharded"
    shutil.copytree(ZOO / "target", folder)
    (folder / "model.safetensors").rename(folder / "model-00001-of-00002.safetensors")
    names = ct.tensor_names(folder)
    weight_map = {n: f"model-0000{1 + i % 2}-of-00002.safetensors" for i, n in enumerate(sorted(names))}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    assert ct.missing_shards(folder) == ["model-00002-of-00002.safetensors"]
    text = _problems(_recipe(tmp_path, folder))
    assert "model.checkpoint:" in text and "model-00002-of-00002.safetensors" in text and "incomplete" in text


def test_a_truncated_weights_file_is_refused(tmp_path):
    folder = tmp_path / "target"
    shutil.copytree(ZOO / "target", folder)
    weights = folder / "model.safetensors"
    size = weights.stat().st_size
    with open(weights, "r+b") as f:
        f.truncate(size - 1000)
    assert ct.truncated(folder) == [("model.safetensors", size - 1000, size)]
    assert ct.truncated(ZOO / "target") == []
    text = _problems(_recipe(tmp_path, folder))
    assert "model.checkpoint:" in text and "model.safetensors is truncated" in text and f"{size:,} bytes" in text


@pytest.mark.parametrize("damage", ["empty", "short", "huge-length", "not-json", "fifo"])
def test_unreadable_weights_say_nothing_and_never_block(damage, tmp_path):
    path = tmp_path / "model.safetensors"
    if damage == "fifo":
        os.mkfifo(path)
    else:
        path.write_bytes(
            {
                "empty": b"",
                "short": b"\x01\x02",
                "huge-length": struct.pack("<Q", 1 << 40) + b"{}",
                "not-json": struct.pack("<Q", 4) + b"{no!",
            }[damage]
        )
    assert ct.tensor_names(tmp_path) is None


def test_a_weights_file_linked_from_outside_the_folder_is_not_read(tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    save_file({"model.embed_tokens.weight": np.zeros(2, np.float32)}, str(outside / "model.safetensors"))
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "model.safetensors").symlink_to(outside / "model.safetensors")
    assert ct.tensor_names(folder) is None
    assert ct.tensor_names(folder, root=tmp_path) == {"model.embed_tokens.weight"}


def test_eagle3_exports_with_a_numbered_layer_are_eagle3_not_eagle1():
    eagle1 = ["fc.weight", "fc.bias", "layers.0.self_attn.q_proj.weight", "layers.0.post_attention_layernorm.weight"]
    assert ct.layout(eagle1) == ct.EAGLE1
    assert (
        ct.layout(
            [
                "fc.weight",
                "layers.0.hidden_norm.weight",
                "layers.0.self_attn.q_proj.weight",
                "norm.weight",
                "lm_head.weight",
            ]
        )
        == ct.EAGLE3
    )


def test_layers_after_the_last_decoder_layer_are_not_missing():
    names = [f"model.layers.{i}.mlp.w" for i in range(4)] + ["model.layers.4.eh_proj.weight"]  # an MTP layer
    assert ct.missing_layers(names, 4) == []
    assert ct.missing_layers(names[:2], 4) == [2, 3]
    assert ct.missing_layers(["transformer.h.0.attn.w", "transformer.h.2.attn.w"], 3) == [1]  # GPT-2 naming
