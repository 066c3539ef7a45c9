"""The fixtures are what they claim (published facts, checked here by hand), and model ids resolve through a
Hugging Face hub cache laid out as huggingface_hub lays it out."""

from __future__ import annotations

import json

import pytest

from real_checkpoints.builder import EAGLE3_HUB_COMMIT, HUB_COMMIT
from specbuild.checkpoints import checkpoint_tensors as ct
from specbuild.cli import main
from specbuild.errors import RecipeError
from specbuild.methods.mtp import has_mtp_layers
from specbuild.recipe import load_recipe

LLAMA_ID, EAGLE3_ID = "meta-llama/Llama-3.1-8B-Instruct", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"


def test_llama31_index_is_the_published_one(real):
    index = json.loads((real.llama31_8b / "model.safetensors.index.json").read_text())
    weight_map = index["weight_map"]
    assert index["metadata"]["total_size"] == 16060522496 and len(weight_map) == 291
    shard = {n: int(f[6:11]) for n, f in weight_map.items()}
    # zml/zml mlir/main.zig's copy of the map: layer 20 splits after gate_proj, layer 31 after up_proj
    assert [
        shard[f"model.layers.20.{t}"] for t in ("self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight")
    ] == [2, 2, 3]
    assert [shard[f"model.layers.31.{t}"] for t in ("mlp.up_proj.weight", "mlp.down_proj.weight")] == [3, 4]
    assert shard["lm_head.weight"] == 4 and shard["model.layers.10.input_layernorm.weight"] == 2
    files = sorted(real.llama31_8b.glob("model-*.safetensors"))
    assert sum(f.stat().st_size for f in files) > 16_060_522_496  # data plus headers ...
    assert sum(f.stat().st_blocks for f in files) * 512 < 10_000_000  # ... all of it holes


def test_heads_are_read_as_published(real):
    eagle3 = ct.tensor_shapes(real.eagle3, ct.EAGLE3.files)
    assert eagle3["fc.weight"] == (4096, 3 * 4096) and eagle3["d2t"] == (32000,) and eagle3["t2d"] == (128256,)
    assert "embed_tokens.weight" not in eagle3 and ct.layout(eagle3) == ct.EAGLE3
    medusa = ct.tensor_names(real.medusa, ct.MEDUSA.files)
    assert (
        ct.medusa_heads(medusa) == 5 and json.loads((real.medusa / "config.json").read_text())["medusa_num_heads"] == 2
    )
    assert ct.layout(ct.tensor_names(real.eagle1, ct.EAGLE1.files)) == ct.EAGLE1
    assert len(ct.tensor_names(real.llama32_1b)) == 146 and "lm_head.weight" not in ct.tensor_names(real.llama32_1b)
    r1 = ct.tensor_names(real.deepseek_r1)
    assert len(r1) == 91991 and "model.layers.61.eh_proj.weight" in r1 and has_mtp_layers(r1, 61)


def test_pytorch_zips_are_what_torch_load_reads(real):
    torch = pytest.importorskip("torch")
    heads = torch.load(real.medusa / "medusa_lm_head.pt", map_location="meta", weights_only=True)
    assert heads["4.1.weight"].shape == (32000, 4096) and heads["4.1.weight"].dtype == torch.float16
    shard = torch.load(real.vicuna / "pytorch_model-00002-of-00002.bin", map_location="meta", weights_only=True)
    assert shard["lm_head.weight"].shape == (32000, 4096)


def test_tokenizer_stand_ins_carry_the_real_ids(real):
    sentencepiece = pytest.importorskip("sentencepiece")
    sp = sentencepiece.SentencePieceProcessor(model_file=str(real.vicuna / "tokenizer.model"))
    assert (sp.GetPieceSize(), sp.unk_id(), sp.bos_id(), sp.eos_id()) == (32000, 0, 1, 2)
    assert sp.IdToPiece(3) == "<0x00>"
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(real.llama31_8b / "tokenizer.json"))
    assert tok.encode("Hello world").ids == [128000, 9906, 1917]  # meta-llama/Llama-3.1-8B-Instruct tokenizer.json
    assert tok.token_to_id("<|eot_id|>") == 128009 and tok.get_vocab_size() == 128256
    deepseek = Tokenizer.from_file(str(real.deepseek_r1 / "tokenizer.json"))
    assert (deepseek.token_to_id("<think>"), deepseek.token_to_id("</think>")) == (128798, 128799)
    assert deepseek.token_to_id("<\uff5cbegin\u2581of\u2581sentence\uff5c>") == 0


def test_the_chat_template_renders_through_transformers(real):
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(str(real.llama31_8b))
    text = tok.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date")
    assert text.endswith(
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    )


# --- model ids through the hub cache ----------------------------------------------------------------------------


def eagle3_by_id(recipe_file, model=LLAMA_ID, head=f"{EAGLE3_ID}@main"):
    return recipe_file(
        "hub-eagle3",
        flavour="llm-api",
        triton={"streaming": True},
        model={"checkpoint": model, "dtype": "bfloat16"},
        speculation={"method": "eagle3", "checkpoint": head, "max_draft_len": 3},
    )


def test_a_model_id_resolves_from_the_hub_cache(gpu, real, recipe_file, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(real.hub))
    path = eagle3_by_id(recipe_file)
    assert main(["check", str(path)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert main(["plan", str(path), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    model, head = plan["checkpoints"]["model.checkpoint"], plan["checkpoints"]["speculation.checkpoint"]
    snapshot = real.hub / "models--meta-llama--Llama-3.1-8B-Instruct" / "snapshots" / HUB_COMMIT
    assert (model["model_id"], model["revision"], model["commit"]) == (LLAMA_ID, "main", HUB_COMMIT)
    assert model["path"] == str(snapshot)
    assert (head["model_id"], head["commit"]) == (EAGLE3_ID, EAGLE3_HUB_COMMIT)
    assert main(["plan", str(path)]) == 0
    assert f"model.checkpoint: {LLAMA_ID}@main = commit {HUB_COMMIT}, {snapshot}" in capsys.readouterr().out
    assert main(["compile", str(path), "--no-validate", "--repo-dir", str(tmp_path / "repo")]) == 0
    import yaml

    written = yaml.safe_load((tmp_path / "repo" / "hub-eagle3" / "tensorrt_llm" / "1" / "model.yaml").read_text())
    assert written["model"] == str(snapshot)  # the snapshot the id resolved to, for the stages after the plan


def test_a_commit_hash_revision_resolves(gpu, real, recipe_file, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(real.hub))
    recipe = load_recipe(eagle3_by_id(recipe_file, model=f"{LLAMA_ID}@{HUB_COMMIT}"))
    assert recipe.model_dir.name == HUB_COMMIT and recipe.checkpoint(recipe.model.checkpoint).commit == HUB_COMMIT


def test_a_model_id_not_in_the_cache_says_how_to_get_it(gpu, real, recipe_file, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(real.hub))
    with pytest.raises(RecipeError) as caught:
        load_recipe(eagle3_by_id(recipe_file, model="meta-llama/Llama-3.3-70B-Instruct"))
    message = str(caught.value)
    assert "model.checkpoint: meta-llama/Llama-3.3-70B-Instruct is not a folder" in message
    assert f"not in the hub cache {real.hub}" in message and "specbuild download" in message
    with pytest.raises(RecipeError, match=r"has no revision v2 .*specbuild download"):
        load_recipe(eagle3_by_id(recipe_file, model=f"{LLAMA_ID}@v2"))


def test_the_hub_repository_root_is_answered_with_its_snapshot(gpu, real, recipe_file):
    root = real.hub / "models--meta-llama--Llama-3.1-8B-Instruct"
    with pytest.raises(RecipeError) as caught:
        load_recipe(eagle3_by_id(recipe_file, model=str(root)))
    message = str(caught.value)
    assert "is a Hugging Face hub-cache repository" in message
    assert f"point it at {root / 'snapshots' / HUB_COMMIT}, or give the model id {LLAMA_ID}" in message


def test_download_is_the_only_command_that_fetches(gpu, real, recipe_file, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(real.hub))
    assert main(["download", str(eagle3_by_id(recipe_file))]) == 0
    out = capsys.readouterr().out
    assert f"model.checkpoint: {LLAMA_ID} is in the hub cache" in out
    # HF_HUB_OFFLINE=1 (the gpu fixture): the fetch is tried and its failure is a user error, not a traceback
    code = main(["download", str(eagle3_by_id(recipe_file, model="meta-llama/Llama-3.3-70B-Instruct"))])
    err = capsys.readouterr().err
    assert code == 2 and "could not download meta-llama/Llama-3.3-70B-Instruct" in err and "Traceback" not in err
