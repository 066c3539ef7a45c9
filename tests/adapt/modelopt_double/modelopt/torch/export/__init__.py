"""export_speculative_decoding of nvidia-modelopt 0.47.0 (EagleExporter's files), see modelopt/__init__."""

import json
import tempfile
from pathlib import Path

from safetensors.torch import save_file

from modelopt import record

REQUIRED = {
    "layers.0.self_attn.q_proj",
    "layers.0.self_attn.k_proj",
    "layers.0.self_attn.v_proj",
    "layers.0.self_attn.o_proj",
    "layers.0.mlp.gate_proj",
    "layers.0.mlp.up_proj",
    "layers.0.mlp.down_proj",
    "layers.0.hidden_norm",
    "layers.0.input_layernorm",
    "layers.0.post_attention_layernorm",
    "norm",
    "fc",
}


def export_speculative_decoding(model, dtype=None, export_dir=tempfile.gettempdir()):
    assert any(m[0] == "eagle" for m in getattr(model, "_modelopt_state", [])), "Model is not optimized"
    export_dir = Path(export_dir)
    export_dir.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().clone().contiguous() for k, v in model.eagle_module.state_dict().items()}
    if "lm_head.weight" not in state:
        state["lm_head.weight"] = model.lm_head.weight.detach().clone()
    for key in REQUIRED:
        assert f"{key}.weight" in state, f"Missing required key: {key}.weight"
    save_file(state, str(export_dir / "model.safetensors"))
    c = model.eagle_config
    config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_act": c.hidden_act,
        "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size,
        "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads,
        "num_hidden_layers": c.num_hidden_layers,
        "rms_norm_eps": c.rms_norm_eps,
        "vocab_size": c.vocab_size,
        "draft_vocab_size": c.draft_vocab_size,
        "head_dim": c.head_dim,
        "torch_dtype": str(c.torch_dtype),
        "max_position_embeddings": model.config.max_position_embeddings,
        "tie_word_embeddings": False,
        "attention_bias": c.attention_bias,
        "mlp_bias": c.mlp_bias,
        "rope_theta": c.rope_theta,
        "rope_scaling": model.eagle_export_rope_scaling or getattr(c, "rope_scaling", None),
        "eagle_config": {
            "eagle_aux_hidden_state_layer_ids": c.eagle_aux_hidden_state_layer_ids,
            "use_aux_hidden_state": c.use_aux_hidden_state,
            "use_last_layernorm": c.use_last_layernorm,
            "next_layer_regular": True,
        },
    }
    (export_dir / "config.json").write_text(json.dumps(config, indent=4))
    record("export", dtype=str(dtype), export_dir=str(export_dir), keys=sorted(state))
