"""Reading `trtllm-build --help`: declared options and their choices, not flags mentioned in help sentences."""

from __future__ import annotations

import subprocess

from specbuild.trtllm.doctor import specbuild_argvs
from specbuild.trtllm.help_flags import parse_help

HELP = """usage: trtllm-build [-h] [--checkpoint_dir CHECKPOINT_DIR]

options:
  -h, --help            show this help message and exit
  --max_seq_len MAX_SEQ_LEN, --max_decoder_seq_len MAX_SEQ_LEN
                        Maximum total length of one request.
  --max_num_tokens MAX_NUM_TOKENS
                        you may explicitly disable it by specifying
                        ``--remove_input_padding disable``.
  --gemm_plugin {auto,float16,float32,bfloat16,int32,fp8,nvfp4,disable}
                        The GEMM plugin. (default: None)
  --gather_generation_logits
                        Enable gathering generation logits. (default: False)
  --workers WORKERS     The number of workers.
"""


def test_parse_help_reads_options_aliases_and_choices():
    flags = parse_help(HELP).flags
    assert set(flags) == {
        "--help",
        "--max_seq_len",
        "--max_decoder_seq_len",
        "--max_num_tokens",
        "--gemm_plugin",
        "--gather_generation_logits",
        "--workers",
    }
    assert flags["--gemm_plugin"] == ("auto", "float16", "float32", "bfloat16", "int32", "fp8", "nvfp4", "disable")
    assert flags["--workers"] is None


def test_problems_lists_unknown_flags_and_bad_values():
    flags = parse_help(HELP)
    argv = [
        "trtllm-build",
        "--workers",
        "1",
        "--gemm_plugin",
        "fp4",
        "--remove_input_padding",
        "enable",
        "--gather_generation_logits",
    ]
    assert flags.problems(argv) == [
        "--gemm_plugin fp4: this trtllm-build accepts {auto,float16,float32,bfloat16,int32,fp8,nvfp4,disable}",
        "--remove_input_padding is not an option of this trtllm-build",
    ]


def test_the_double_accepts_every_flag_specbuild_passes(machine):
    out = subprocess.run(["trtllm-build", "--help"], capture_output=True, text=True, check=True)
    flags = parse_help(out.stdout)
    argvs = specbuild_argvs()
    passed = {a for argv in argvs for a in argv if a.startswith("--")}
    # every flag of build.py specbuild relies on is among them
    assert {
        "--speculative_decoding_mode",
        "--max_draft_len",
        "--max_batch_size",
        "--max_input_len",
        "--max_seq_len",
        "--max_num_tokens",
        "--gemm_plugin",
        "--use_paged_context_fmha",
        "--gather_generation_logits",
        "--kv_cache_type",
        "--tokens_per_block",
        "--context_fmha",
        "--remove_input_padding",
        "--gpt_attention_plugin",
        "--workers",
        "--max_beam_width",
    } <= passed
    assert "--gather_context_logits" not in passed  # never with drafts (build.py)
    assert [p for argv in argvs for p in flags.problems(argv)] == []
