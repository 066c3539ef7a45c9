import transformers

from modelopt import record


def load_vlm_or_llm(
    model_name_or_path,
    use_fake_base=False,
    use_offline_training=False,
    dtype=None,
    device_map=None,
    trust_remote_code=False,
):
    config = transformers.AutoConfig.from_pretrained(model_name_or_path)
    extra = {"num_hidden_layers": 0} if use_offline_training else {}
    # the real one passes device_map on (transformers then needs accelerate, which its [hf] extra installs)
    model = transformers.AutoModelForCausalLM.from_pretrained(model_name_or_path, dtype=dtype, **extra)
    if use_offline_training:
        model.config.num_orig_hidden_layers = config.num_hidden_layers
    record("load_vlm_or_llm", offline=use_offline_training, dtype=str(dtype), device_map=device_map)
    return model
