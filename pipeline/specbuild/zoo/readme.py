"""README.md for a built zoo folder, rendered from the build summary (so it never drifts from it)."""

from __future__ import annotations


def _fmt(values) -> str:
    return " / ".join("-" if v is None else f"{v:.2f}" for v in values)


def render_readme(s: dict) -> str:
    q, m, p = s["quality"], s["models"], s["profile_config"]
    t = s["timings_seconds"]
    lines = [
        f"# specbuild model zoo: `{s['profile']}` profile",
        "",
        "Real-format checkpoints trained on this machine's CPU from the Python standard library's own sources.",
        "They exist so that every part of specbuild runs on real files; they are not useful language models.",
        "",
        "| folder | what | params | format |",
        "|---|---|---|---|",
        f"| `tokenizer/` | byte-level BPE, vocab {m['tokenizer']['vocab_size']} | - | tokenizer.json + tokenizer_config.json (AutoTokenizer) |",
        f"| `target/` | Llama {p['target']['layers']} layers x hidden {p['target']['hidden']} | {m['target']['params']:,} | Hugging Face folder (model.safetensors, tokenizer included) |",
        f"| `draft/` | Llama {p['draft']['layers']} layer x hidden {p['draft']['hidden']}, distilled from the target | {m['draft']['params']:,} | Hugging Face folder |",
        f"| `medusa/` | {m['medusa']['num_heads']} Medusa heads (1 ResBlock each) | {m['medusa']['params']:,} | TensorRT-LLM `--medusa_model_dir`: config.json + medusa_lm_head.safetensors |",
        f"| `eagle/` | EAGLE-1 head (fc + 1 decoder layer; embedding copy) | {m['eagle']['params']:,} | TensorRT-LLM `--eagle_model_dir`: config.json + pytorch_model.bin |",
        *(
            [
                f"| `eagle3/` | EAGLE-3 head (fc over target layers {m['eagle3']['layers_to_capture']} + 1 decoder layer + "
                f"lm_head over {m['eagle3']['draft_vocab_size']} draft tokens, d2t) | {m['eagle3']['params']:,} | TensorRT-LLM "
                "`speculative_config.speculative_model` (decoding_type Eagle3): config.json + model.safetensors |"
            ]
            if "eagle3" in m
            else []
        ),
        *(
            [
                f"| `pard/` | PARD draft: `draft/` plus a mask token (id {m['pard']['mask_token_id']}, vocab "
                f"{m['pard']['vocab_size']}), drafts up to {m['pard']['depth']} tokens per forward | {m['pard']['params']:,} | "
                "TensorRT-LLM `speculative_config.speculative_model` (decoding_type PARD): Hugging Face folder, "
                "`pard_token` in config.json |"
            ]
            if "pard" in m
            else []
        ),
        *(
            [
                f"| `mtp-target/` | a second target: DeepseekV3 {m['mtp-target']['shape']['layers']} layers x hidden "
                f"{m['mtp-target']['shape']['hidden']} (MLA, dense MLPs) + {m['mtp-target']['num_nextn_predict_layers']} "
                f"multi-token-prediction layer | {m['mtp-target']['params']:,} + {m['mtp-target']['mtp_params']:,} MTP | "
                "Hugging Face folder, MTP layer in DeepSeek-V3's layout (TensorRT-LLM `decoding_type: MTP`) |"
            ]
            if "mtp-target" in m
            else []
        ),
        "",
        f"Weights are stored as {s['storage_dtype']}. Special tokens: `<unk>`=0, `<s>`=1 (prepended by the tokenizer), "
        "`</s>`=2 (ends every training document, so the models learn to stop); pad = `</s>`.",
        "",
        "## Quality (held-out prompts, greedy)",
        "",
        f"Measured on {q['heldout']['prompts']} held-out prompts of {q['heldout']['prompt_tokens']} tokens, each "
        f"continued greedily by the target for {q['heldout']['greedy_new_tokens']} tokens; each drafter is replayed "
        "as greedy chain speculation (no tree). AL = mean acceptance length, bonus token included.",
        "",
        f"- target validation loss: {q['target']['validation_loss_nats_per_token']} nats/token "
        f"(perplexity {q['target']['validation_perplexity']})",
        f"- draft model, k={q['draft_model']['k']}: acceptance rate {q['draft_model']['acceptance_rate']:.3f}, "
        f"AL {q['draft_model']['mean_acceptance_length']:.2f}",
        f"- Medusa top-1 per head: {_fmt(q['medusa']['top1_per_head'])}; chain AL {q['medusa']['chain']['mean_acceptance_length']:.2f}",
        f"- EAGLE top-1 per step (own features from step 2): {_fmt(q['eagle']['top1_per_step'])}; "
        f"chain AL {q['eagle']['chain']['mean_acceptance_length']:.2f}",
        *(
            [
                f"- EAGLE-3 top-1 per step (own outputs from step 2): {_fmt(q['eagle3']['top1_per_step'])}; chain AL "
                f"{q['eagle3']['chain']['mean_acceptance_length']:.2f}; its draft vocabulary covers "
                f"{100 * q['eagle3']['draft_vocab_coverage']:.1f}% of the target's held-out greedy tokens"
            ]
            if "eagle3" in q
            else []
        ),
        *(
            [
                f"- PARD draft, k={q['pard']['k']} (one forward per step): top-1 per position "
                f"{_fmt(q['pard']['top1_per_step'])}; chain AL {q['pard']['chain']['mean_acceptance_length']:.2f}"
            ]
            if "pard" in q
            else []
        ),
        *(
            [
                f"- MTP target: validation loss {q['mtp-target']['validation_loss_nats_per_token']} nats/token; its MTP "
                f"layer, drafting from its own greedy continuations: top-1 per step (own outputs from step 2) "
                f"{_fmt(q['mtp-target']['top1_per_step'])}; chain AL {q['mtp-target']['chain']['mean_acceptance_length']:.2f} "
                f"at depth {q['mtp-target']['depth']}, {q['mtp-target']['chain_depth_1']['mean_acceptance_length']:.2f} "
                "at depth 1"
            ]
            if "mtp-target" in q
            else []
        ),
        "",
        "## How it was built",
        "",
        f"Corpus: {s['corpus']['files']} stdlib files ({s['corpus']['bytes']:,} bytes, sorted by path, capped), "
        f"sha256 `{s['corpus']['sha256']}`. Python {s['versions']['python']}, torch {s['versions']['torch']}, "
        f"transformers {s['versions']['transformers']}, tokenizers {s['versions']['tokenizers']}; "
        f"{s['threads']} threads, fixed seeds, deterministic algorithms, {s['training_precision']}"
        + "".join(
            f"; stage `{k}`: {v}"
            for k, v in (s.get("stage_precision") or {}).items()
            if v != s.get("precision", v) or k in _added(s)
        )
        + ".",
        "",
        f"Build time {s['build_seconds']:.0f} s: "
        + ", ".join(f"{k} {v:.0f} s" for k, v in t.items() if k not in _added(s))
        + "."
        + (
            f" (stages {', '.join(s['reused_stages']['stages'])} were reused from an earlier, identical-settings "
            "run with `--resume-from`; their recorded times are included.)"
            if s.get("reused_stages")
            else ""
        ),
        "The draft, the Medusa heads and the EAGLE head learn from the target's own greedy continuations and "
        "its final hidden states (see `pipeline/specbuild/zoo/distill.py`). `manifest.json` records every "
        "file's size and sha256, the training figures and the versions.",
        "",
        *_accepts(s),
        *(_eagle3_section(s) if "eagle3" in m else []),
        *(_pard_section(s) if "pard" in m else []),
        *(_mtp_section(s) if "mtp-target" in m else []),
        "## Rebuild",
        "",
        "```",
        s["rebuild"],
        "```",
        "",
        "A rebuild on another Python version (another stdlib), other library versions or at another training",
        "precision gives other bytes. `--precision auto` (the default) trains under bf16 autocast only on CPUs with",
        "bf16 instructions (avx512_bf16, amx_bf16) and in float32 elsewhere, where emulated bf16 is ~20x slower;",
        "`--precision bfloat16` forces it. Rebuild only when something is wrong with these files.",
        "",
        *_added_stages_note(s),
    ]
    return "\n".join(lines)


def _accepts(s: dict) -> list[str]:
    m, p = s["models"], s["profile_config"]
    hidden, vocab = p["target"]["hidden"], m["tokenizer"]["vocab_size"]
    lines = [
        "## What each part accepts",
        "",
        f"- `target/`, `draft/`: any Llama runtime (transformers `AutoModelForCausalLM`, TensorRT-LLM's Llama "
        f"converter, llama.cpp's `convert_hf_to_gguf.py`); both read `tokenizer/`'s {vocab}-token vocabulary, so the "
        "draft serves the target for draft-target speculation. Context: "
        f"{p['max_position_embeddings']} positions (trained on {p['seq_len']}-token blocks).",
        "- `medusa/`, `eagle/`" + (", `eagle3/`" if "eagle3" in m else "") + f": this target only (hidden size "
        f"{hidden}, vocabulary {vocab}); they were trained on its own features, so another target of the same shape "
        "would verify their drafts losslessly but accept few of them.",
        *(
            [
                f"- `pard/`: any target that reads `tokenizer/`'s {vocab}-token vocabulary (PARD is target-independent: "
                "no hidden states), with its mask token as the one extra id; it was distilled on this target's "
                "continuations, so this target accepts the most of its drafts."
            ]
            if "pard" in m
            else []
        ),
        "",
    ]
    return lines


def _pard_section(s: dict) -> list[str]:
    e = s["models"]["pard"]
    t = e["training"]
    precision = s.get("stage_precision", {}).get("pard", s.get("precision", ""))
    return [
        "## The PARD draft (`pard/`)",
        "",
        f"`draft/` adapted into a parallel draft model (PARD, arXiv 2504.18583): its vocabulary grown by one mask "
        f"token, id {e['mask_token_id']} (`pard_token` in config.json, which TensorRT-LLM reads first; "
        f"`vocab_size` {e['vocab_size']} = the target's + 1). A step drafts K <= {e['depth']} tokens in one forward over "
        "the accepted text followed by K - 1 mask tokens; it accepts any target with this tokenizer. In `model.yaml`:",
        "",
        "```yaml",
        "speculative_config:",
        "  decoding_type: PARD",
        "  speculative_model: <path>/pard",
        f"  max_draft_len: {min(4, e['depth'])}",
        "```",
        "",
        f"How it was trained: {t['steps']} AdamW steps of {t['batch']} rows (peak lr {t['peak_lr']}) on "
        f"{t['teacher_rows']} teacher rows laid out as {e['depth']} parallel copies "
        f"(`pipeline/specbuild/zoo/distill_pard.py`), {precision} precision, {t['seconds']:.0f} s; final loss "
        f"{t['final_loss']}.",
        "",
    ]


def _added(s: dict) -> set[str]:
    """Stages trained later into the folder by `add-stage` (not part of the original build's time)."""
    return {a["stage"] for a in s.get("added_stages") or []}


def _eagle3_section(s: dict) -> list[str]:
    e, q = s["models"]["eagle3"], s["quality"]["eagle3"]
    layers = e["layers_to_capture"]
    precision = s.get("stage_precision", {}).get("eagle3", s.get("precision", ""))
    from specbuild.heads.eagle3 import trtllm_default_layers

    num_layers = s["profile_config"]["target"]["layers"]
    default = trtllm_default_layers(num_layers)
    default = list(default) if default is not None else None
    if default == layers:
        where = (
            f"These are TensorRT-LLM's default capture set {{1, L//2-1, L-4}} for this {num_layers}-layer target, "
            "so `eagle3_layers_to_capture` may be left out; set explicitly, e.g. in `model.yaml`:"
        )
    elif default is None:
        where = (
            f"The target has {num_layers} layers, so TensorRT-LLM's default capture set {{1, L//2-1, L-4}} does "
            "not apply (it needs L > 5): set them explicitly, e.g. in `model.yaml`:"
        )
    else:
        where = (
            f"TensorRT-LLM's default capture set for this {num_layers}-layer target would be {default}, not "
            "these: set them explicitly, e.g. in `model.yaml`:"
        )
    return [
        "## The EAGLE-3 head (`eagle3/`)",
        "",
        f"What it accepts: the target in `target/` only (same width and vocabulary). It fuses the outputs of target "
        f"decoder layers {layers} (0-based, residual stream before the final norm). {where}",
        "",
        "```yaml",
        "speculative_config:",
        "  decoding_type: Eagle3",
        "  speculative_model: <path>/eagle3",
        f"  max_draft_len: {s['profile_config']['eagle_depth']}",
        f"  eagle3_layers_to_capture: {layers}",
        "```",
        "",
        f"(`config.json` also records them as `eagle_config.eagle_aux_hidden_state_layer_ids`, ModelOpt's key, which "
        "the reference runtime falls back to.) Its output vocabulary is the target's "
        f"{e['draft_vocab_size']} most frequent teacher-data tokens, sorted by id: `d2t[i]` maps draft index i to "
        "target id i + d2t[i]; `t2d` marks them in the target vocabulary. The embedding is the target's (not stored).",
        "",
        f"How it was trained: {e['training']['steps']} AdamW steps of {e['training']['batch']} rows (peak lr "
        f"{e['training']['peak_lr']}) on the same teacher data as the other heads (the target's greedy continuations "
        f"and corpus rows), {e['ttt_steps']}-step training-time test (`pipeline/specbuild/zoo/distill_eagle3.py`), "
        f"{precision} precision, {e['training']['seconds']:.0f} s; final loss {e['training']['final_loss']}. "
        f"lm_head starts as the target's rows of the draft vocabulary, norm as its final norm. Held-out chain AL "
        f"{q['chain']['mean_acceptance_length']:.2f} at depth {q['depth']} (above).",
        "",
    ]


def _mtp_section(s: dict) -> list[str]:
    e, q = s["models"]["mtp-target"], s["quality"]["mtp-target"]
    a, t = e["attention"], e["training"]
    precision = s.get("stage_precision", {}).get("mtp-target", s.get("precision", ""))
    return [
        "## The MTP target (`mtp-target/`)",
        "",
        "A target of its own (not a head of `target/`): DeepSeek-V3's architecture at tiny size, multi-head latent "
        f"attention (kv_lora_rank {a['kv_lora_rank']}, qk_nope/qk_rope/v head dims {a['qk_nope_head_dim']}/"
        f"{a['qk_rope_head_dim']}/{a['v_head_dim']}, interleaved RoPE), dense SwiGLU MLPs only (`first_k_dense_replace` "
        "covers every decoder layer and the MTP layer, so no reader builds an MoE layer), and "
        f"`num_nextn_predict_layers: {e['num_nextn_predict_layers']}`: the MTP module is decoder layer "
        f"{e['shape']['layers']} of `model.safetensors` (`enorm`, `hnorm`, `eh_proj`, `shared_head.norm`, "
        "`shared_head.head` and `embed_tokens` copies of the main model's, and a full decoder layer), as DeepSeek-V3/R1 "
        "store theirs (`pipeline/specbuild/heads/mtp.py` cites the layouts). It shares `tokenizer/`. transformers "
        "loads the main model (the MTP tensors are reported as unused: its DeepSeek-V3 class ignores layer 61 only); "
        "TensorRT-LLM and the reference runtime draft with the MTP layer:",
        "",
        "```yaml",
        "speculative_config:",
        "  decoding_type: MTP",
        f"  max_draft_len: {q['depth']}   # MTP-Eagle: the one layer chained (1.3; older releases: num_nextn_predict_layers)",
        "```",
        "",
        f"How it was trained: {t['steps']} AdamW steps of {t['batch']} corpus blocks (peak lr {t['peak_lr']}), "
        f"{e['objective']}; {precision} precision, {t['seconds']:.0f} s; final losses main {t['final_main_loss']}, "
        f"MTP {t['final_mtp_loss']} (`pipeline/specbuild/zoo/mtp_target.py`). Its quality (above) is measured on its "
        "own greedy continuations of the held-out prompts.",
        "",
    ]


def _added_stages_note(s: dict) -> list[str]:
    lines = []
    for a in s.get("added_stages") or []:
        v = a["versions"]
        teacher = a.get("teacher_data_seconds")
        reused = (
            f"{_inputs(a)} (their files are unchanged) and regenerates the teacher data from them "
            f"({teacher:.0f} s + {a['stage_seconds']:.0f} s training"
            if teacher is not None
            else f"tokenizer (unchanged) and trains on the same corpus ({a['stage_seconds']:.0f} s training"
        )
        lines += [
            f"Stage `{a['stage']}` was added later to this folder by `add-stage`, which reuses the folder's own "
            f"{reused}, {a['threads']} threads, "
            f"{a['training_precision']}; CPU native bf16: {a['cpu_native_bf16']}; torch {v['torch']}, transformers "
            f"{v['transformers']}):",
            "",
            "```",
            a["command"].replace("<folder>", "checkpoints/" + s["profile"]),
            "```",
            "",
        ]
    return lines


def _inputs(added: dict) -> str:
    """The folder parts an added stage read, as its manifest entry records them ('tokenizer/ and target/, draft/ of
    this folder ...'); older entries read the tokenizer and the target."""
    reused = added.get("reused", "")
    parts = [w.rstrip(",/") for w in reused.split(" of this folder")[0].replace(" and ", ", ").split(", ") if w]
    return " and ".join([", ".join(parts[:-1]), parts[-1]]) if len(parts) > 1 else "tokenizer and target"
