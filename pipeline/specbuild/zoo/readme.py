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
        "",
        "## How it was built",
        "",
        f"Corpus: {s['corpus']['files']} stdlib files ({s['corpus']['bytes']:,} bytes, sorted by path, capped), "
        f"sha256 `{s['corpus']['sha256']}`. Python {s['versions']['python']}, torch {s['versions']['torch']}, "
        f"transformers {s['versions']['transformers']}, tokenizers {s['versions']['tokenizers']}; "
        f"{s['threads']} threads, fixed seeds, deterministic algorithms, {s['training_precision']}.",
        "",
        f"Build time {s['build_seconds']:.0f} s: " + ", ".join(f"{k} {v:.0f} s" for k, v in t.items()) + "."
        + (f" (stages {', '.join(s['reused_stages']['stages'])} were reused from an earlier, identical-settings "
           "run with `--resume-from`; their recorded times are included.)" if s.get("reused_stages") else ""),
        "The draft, the Medusa heads and the EAGLE head learn from the target's own greedy continuations and "
        "its final hidden states (see `pipeline/specbuild/zoo/distill.py`). `manifest.json` records every "
        "file's size and sha256, the training figures and the versions.",
        "",
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
    ]
    return "\n".join(lines)
