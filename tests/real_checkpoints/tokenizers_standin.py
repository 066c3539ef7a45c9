"""Tokenizer stand-ins with the real vocabulary sizes, special tokens and ids (the real files cannot be fetched
here). Their ordinary vocabularies are filler: only the special tokens, the sizes and the few ids named below are
the real ones.

- Llama 3 (tokenizer.json, a byte-level BPE; meta-llama/llama-models `models/llama3/tokenizer.py`): 128000 ordinary
  ranks and 256 special tokens 128000-128255 (`<|begin_of_text|>` 128000, `<|end_of_text|>` 128001,
  `<|finetune_right_pad_id|>` 128004, `<|start_header_id|>` 128006, `<|end_header_id|>` 128007, `<|eom_id|>` 128008,
  `<|eot_id|>` 128009, `<|python_tag|>` 128010, the rest `<|reserved_special_token_N|>`); a post-processor that
  prepends `<|begin_of_text|>`. "Hello" 9906 and " world" 1917 are placed at their real ids (with the merges that
  spell them), so "Hello world" encodes to [128000, 9906, 1917] as the real tokenizer does.
- Llama 2 / vicuna (SentencePiece tokenizer.model, a BPE ModelProto: sentencepiece `src/sentencepiece_model.proto`):
  32000 pieces, `<unk>` 0, `<s>` 1, `</s>` 2, the 256 byte-fallback pieces `<0x00>`..`<0xFF>` at 3-258, then
  ordinary pieces; written with sentencepiece's own ModelProto message (`sentencepiece_model_pb2`).
- DeepSeek-V3/R1 (tokenizer.json): `<｜begin▁of▁sentence｜>` 0, `<｜end▁of▁sentence｜>` 1, `<think>` 128798,
  `</think>` 128799 (the ids TensorRT-LLM's MTPDecodingConfig hard-codes as its thinking-phase tokens), 128815
  tokens in all (config.json's vocab_size 129280 leaves room).
"""

from __future__ import annotations

import json
from pathlib import Path

LLAMA3_SPECIALS = {
    128000: "<|begin_of_text|>",
    128001: "<|end_of_text|>",
    128004: "<|finetune_right_pad_id|>",
    128006: "<|start_header_id|>",
    128007: "<|end_header_id|>",
    128008: "<|eom_id|>",
    128009: "<|eot_id|>",
    128010: "<|python_tag|>",
}
LLAMA3_ORDINARY = 128000


def llama3_special_tokens() -> dict[int, str]:
    out, reserved = {}, 0
    for i in range(128000, 128256):
        if i in LLAMA3_SPECIALS:
            out[i] = LLAMA3_SPECIALS[i]
        else:
            out[i] = f"<|reserved_special_token_{reserved}|>"
            reserved += 1
    return out


def _byte_level_vocab(size: int, placed: dict[str, int], merges: list[tuple[str, str]]) -> dict[str, int]:
    from tokenizers.pre_tokenizers import ByteLevel

    alphabet = sorted(ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    vocab.update(placed)
    for a, b in merges:
        vocab.setdefault(a + b, -1)
    taken = set(vocab.values())
    free = (i for i in range(size) if i not in taken)
    for token in [t for t, i in vocab.items() if i == -1]:
        vocab[token] = next(free)
    filler = 0
    for i in free:
        vocab[f"\u0120filler{filler}"] = i
        filler += 1
    return vocab


def _spelling_merges(words: list[str]) -> list[tuple[str, str]]:
    merges = []
    for word in words:
        for i in range(2, len(word) + 1):
            merges.append((word[: i - 1], word[i - 1]))
    return merges


def write_llama3_tokenizer(folder: Path, chat_template: str) -> None:
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    words = ["Hello", "\u0120world"]
    merges = _spelling_merges(words)
    vocab = _byte_level_vocab(LLAMA3_ORDINARY, {"Hello": 9906, "\u0120world": 1917}, merges)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    specials = llama3_special_tokens()
    tok.add_special_tokens([AddedToken(specials[i], special=True, normalized=False) for i in sorted(specials)])
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A",
        pair="<|begin_of_text|> $A <|begin_of_text|> $B",
        special_tokens=[("<|begin_of_text|>", 128000)],
    )
    tok.save(str(folder / "tokenizer.json"))
    decoder = {
        str(i): {
            "content": t,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for i, t in specials.items()
    }
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "added_tokens_decoder": decoder,
                "bos_token": "<|begin_of_text|>",
                "chat_template": chat_template,
                "clean_up_tokenization_spaces": True,
                "eos_token": "<|eot_id|>",
                "model_input_names": ["input_ids", "attention_mask"],
                "model_max_length": 131072,
                "tokenizer_class": "PreTrainedTokenizerFast",
            },
            indent=2,
        )
    )
    (folder / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"})
    )


def llama2_sentencepiece_proto(pieces: int = 32000) -> bytes:
    # sentencepiece's own ModelProto module: protobuf registers sentencepiece_model.proto once per process, and
    # transformers' SentencePieceExtractor imports this one (importing transformers' copy first makes it fail)
    from sentencepiece import sentencepiece_model_pb2 as sp_pb2

    model = sp_pb2.ModelProto()
    trainer = model.trainer_spec
    trainer.model_type = sp_pb2.TrainerSpec.BPE
    trainer.vocab_size = pieces
    trainer.byte_fallback = True
    trainer.unk_id, trainer.bos_id, trainer.eos_id, trainer.pad_id = 0, 1, 2, -1
    model.normalizer_spec.name = "identity"
    model.normalizer_spec.add_dummy_prefix = True
    model.normalizer_spec.remove_extra_whitespaces = False
    model.normalizer_spec.escape_whitespaces = True

    def add(piece: str, kind, score: float = 0.0) -> None:
        p = model.pieces.add()
        p.piece, p.type, p.score = piece, kind, score

    Piece = sp_pb2.ModelProto.SentencePiece
    add("<unk>", Piece.UNKNOWN)
    add("<s>", Piece.CONTROL)
    add("</s>", Piece.CONTROL)
    for b in range(256):
        add(f"<0x{b:02X}>", Piece.BYTE)
    ordinary = (
        ["\u2581"] + [chr(c) for c in range(ord("a"), ord("z") + 1)] + [chr(c) for c in range(ord("A"), ord("Z") + 1)]
    )
    i = 0
    while len(model.pieces) < pieces:
        add(ordinary[i] if i < len(ordinary) else f"\u2581filler{i}", Piece.NORMAL, -float(i))
        i += 1
    return model.SerializeToString()


def write_llama2_tokenizer(folder: Path, model_max_length: int = 2048) -> None:
    (folder / "tokenizer.model").write_bytes(llama2_sentencepiece_proto())
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "add_bos_token": True,
                "add_eos_token": False,
                "bos_token": "<s>",
                "clean_up_tokenization_spaces": False,
                "eos_token": "</s>",
                "legacy": True,
                "model_max_length": model_max_length,
                "pad_token": None,
                "padding_side": "right",
                "sp_model_kwargs": {},
                "tokenizer_class": "LlamaTokenizer",
                "unk_token": "<unk>",
            },
            indent=2,
        )
    )
    (folder / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"})
    )


def write_deepseek_tokenizer(folder: Path) -> None:
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    ordinary = 128000
    vocab = _byte_level_vocab(ordinary, {}, [])
    specials = {0: "<\uff5cbegin\u2581of\u2581sentence\uff5c>", 1: "<\uff5cend\u2581of\u2581sentence\uff5c>"}
    vocab = {t: i + 2 for t, i in vocab.items() if i + 2 < ordinary}  # 0 and 1 are the sentence markers
    vocab.update({specials[0]: 0, specials[1]: 1})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials.update({i: f"<\uff5cplace\u2581holder\u2581no\u2581{i}\uff5c>" for i in range(ordinary, 128815)})
    specials.update({128798: "<think>", 128799: "</think>"})
    tok.add_special_tokens([AddedToken(specials[i], special=True, normalized=False) for i in sorted(specials)])
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "bos_token": specials[0],
                "eos_token": specials[1],
                "add_bos_token": True,
                "add_eos_token": False,
                "model_max_length": 131072,
                "tokenizer_class": "LlamaTokenizerFast",
            },
            indent=2,
        )
    )
