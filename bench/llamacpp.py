"""llama.cpp beside our decoder: the zoo's checkpoints converted to GGUF, decoded by llama.cpp's
`llama-speculative-simple` (plain decoding, its n-gram lookup and its draft-model speculation), one thread.

`decode.py --llama-cpp SOURCE:BUILD` runs these as contenders in its interleaved rounds (same prompts, same
number of new tokens, in the same rotation as our methods and transformers'); this module only drives llama.cpp.
Nothing of llama.cpp is committed. Its source comes with the llama-cpp-python sdist from PyPI:

    pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d /tmp/llama
    tar xzf /tmp/llama/llama_cpp_python-0.3.36.tar.gz -C /tmp/llama
    SOURCE=/tmp/llama/llama_cpp_python-0.3.36/vendor/llama.cpp
    cmake -S $SOURCE -B /tmp/llama/build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF
    cmake --build /tmp/llama/build -j2 --target llama-speculative-simple

Conversion: the sdist's own `convert_hf_to_gguf.py` (with its `gguf-py`), float32 and float16, with two shims for
our byte-level BPE tokenizer: the converter tries a SentencePiece model first and, when the `sentencepiece` package is
not installed, fails instead of moving on (our folders have no tokenizer.model: it moves on to tokenizer.json); and it
does not know our BPE pre-tokenizer by its hash: it is GPT-2's byte-level one, so an unrecognised hash is converted as
"gpt-2" (llama.cpp's continuations then equal ours: `greedy_identical_to_ours` in decode.py's report counts them).

Every variant is one `llama-speculative-simple` process per prompt (the prompt as text, as llama.cpp reads it;
`--ignore-eos`, greedy, `-n` new tokens, `-t 1 -tb 1 -td 1`); its time is the one llama.cpp itself reports for the
prompt (`encoded ... in`) plus the generation (`decoded ... in`), which leaves out process start and model load, as
ours leaves out engine loading. It may generate a few tokens past `-n` (the last step's accepted drafts), so rates,
not times, compare. Drafted and accepted counts come from its report too.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

BINARY = "llama-speculative-simple"
ENCODED = re.compile(r"encoded\s+(\d+) tokens in\s+([\d.]+) seconds")
DECODED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds")
COUNTS = {name: re.compile(rf"{name}\s*=\s*(\d+)") for name in ("n_drafted", "n_accept")}


@dataclass(frozen=True)
class Variant:
    """One way llama.cpp decodes: the weights' type and the speculation arguments."""

    label: str
    outtype: str  # f32 | f16 (target and draft GGUF)
    spec: tuple[str, ...]  # llama-speculative-simple's speculation arguments
    uses_draft: bool = False


# Plain decoding through the same loop and timers: an n-gram drafter whose n-gram (1024 tokens, its maximum) is
# longer than any context here, so it never drafts (llama-speculative-simple refuses --spec-type none, and a draft
# length of 0 aborts); `run` checks that nothing was drafted.
NEVER_DRAFTS = ("--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "1024")


def variants(k: int) -> list[Variant]:
    """Plain decoding in f32 and f16, n-gram lookup (`ngram-simple`: the last 3 tokens looked up in the context, k
    drafted), draft-model speculation with exactly k drafts (p-min 0, as our draft-target) and with llama.cpp's
    defaults (up to 16 drafts, stop below draft probability 0.75)."""
    return [
        Variant("plain_f32", "f32", NEVER_DRAFTS),
        Variant("plain_f16", "f16", NEVER_DRAFTS),
        Variant(
            "ngram_f32",
            "f32",
            (
                "--spec-type",
                "ngram-simple",
                "--spec-ngram-simple-size-n",
                "3",
                "--spec-ngram-simple-size-m",
                str(k),
                "--spec-ngram-simple-min-hits",
                "1",
            ),
        ),
        Variant(
            "draft_f32",
            "f32",
            (
                "--spec-type",
                "draft-simple",
                "--spec-draft-n-max",
                str(k),
                "--spec-draft-n-min",
                "0",
                "--spec-draft-p-min",
                "0",
            ),
            uses_draft=True,
        ),
        Variant("draft_f32_defaults", "f32", ("--spec-type", "draft-simple"), uses_draft=True),
    ]


@dataclass
class Outcome:
    seconds: float  # prompt + generation
    decode_seconds: float  # generation alone (`decoded ... in`)
    tokens: int
    drafted: int
    accepted: int
    text: str


class LlamaCpp:
    """llama.cpp's speculative-simple over GGUF copies of a zoo profile's target and draft."""

    def __init__(self, source: Path, build: Path, profile: Path, work: Path, threads: int = 1):
        self.source, self.build, self.profile, self.work = Path(source), Path(build), Path(profile), Path(work)
        self.binary = self.build / "bin" / BINARY
        if not self.binary.is_file():
            raise SystemExit(f"{self.binary}: not built — cmake --build {self.build} --target {BINARY}")
        if not (self.source / "convert_hf_to_gguf.py").is_file():
            raise SystemExit(f"{self.source}: no convert_hf_to_gguf.py (the sdist's vendor/llama.cpp folder)")
        self.threads = threads
        self.work.mkdir(parents=True, exist_ok=True)
        self._gguf: dict[tuple[str, str], Path] = {}

    def gguf(self, model: str, outtype: str) -> Path:
        """The zoo's `model` folder (target, draft) as GGUF of `outtype`, converted once (cached by content)."""
        key = (model, outtype)
        if key not in self._gguf:
            folder = self.profile / model
            digest = hashlib.sha256(b"".join((folder / f).read_bytes() for f in ("config.json", "model.safetensors")))
            out = self.work / f"{model}-{outtype}-{digest.hexdigest()[:12]}.gguf"
            if not out.is_file():
                self._convert(folder, outtype, out)
            self._gguf[key] = out
        return self._gguf[key]

    def _convert(self, folder: Path, outtype: str, out: Path) -> None:
        script = (
            "import sys\n"
            f"sys.path[:0] = [{str(self.source)!r}, {str(self.source / 'gguf-py')!r}]\n"
            "import conversion.base as base\n"
            "recognised = base.TextModel.get_vocab_base_pre\n"
            "def gpt2_when_unknown(self, tokenizer):\n"
            "    try:\n"
            "        return recognised(self, tokenizer)\n"
            "    except NotImplementedError:\n"
            "        return 'gpt-2'  # byte-level BPE with GPT-2's pre-tokenizer (the zoo's tokenizer)\n"
            "base.TextModel.get_vocab_base_pre = gpt2_when_unknown\n"
            "sentencepiece = base.TextModel._create_vocab_sentencepiece\n"
            "def without_sentencepiece(self):  # no tokenizer.model: the converter's next reader (tokenizer.json)\n"
            "    if not (self.dir_model / 'tokenizer.model').is_file():\n"
            "        raise FileNotFoundError(self.dir_model / 'tokenizer.model')\n"
            "    return sentencepiece(self)\n"
            "base.TextModel._create_vocab_sentencepiece = without_sentencepiece\n"
            "import convert_hf_to_gguf\n"
            f"sys.argv = ['convert_hf_to_gguf.py', {str(folder)!r}, '--outtype', {outtype!r}, '--outfile', "
            f"{str(out) + '.partial'!r}]\n"
            "convert_hf_to_gguf.main()\n"
        )
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"convert_hf_to_gguf.py {folder} --outtype {outtype} failed:\n{done.stderr[-3000:]}")
        os.replace(str(out) + ".partial", out)

    def argv(self, variant: Variant, prompt: str, new_tokens: int) -> list[str]:
        args = [
            str(self.binary),
            "-m",
            str(self.gguf("target", variant.outtype)),
            "-p",
            prompt,
            "-n",
            str(new_tokens),
            "--ignore-eos",
            "--temp",
            "0",
            "--top-k",
            "1",
            "-c",
            "1024",
            "-b",
            "1024",
            "-ub",
            "1024",
            "-t",
            str(self.threads),
            "-tb",
            str(self.threads),
            "--seed",
            "0",
        ]
        if variant.uses_draft:
            args += [
                "-md",
                str(self.gguf("draft", variant.outtype)),
                "-td",
                str(self.threads),
                "-tbd",
                str(self.threads),
            ]
        return args + list(variant.spec)

    def run(self, variant: Variant, prompt: str, new_tokens: int) -> Outcome:
        done = subprocess.run(
            self.argv(variant, prompt, new_tokens),
            capture_output=True,
            text=True,
            env={**os.environ, "LLAMA_LOG_COLORS": "0"},
        )
        log = done.stderr + done.stdout
        enc, dec = ENCODED.search(log), DECODED.search(log)
        if done.returncode != 0 or enc is None or dec is None:
            raise SystemExit(f"{BINARY} ({variant.label}) failed, exit {done.returncode}:\n{log[-3000:]}")
        counts = {name: int(m.group(1)) if (m := pattern.search(log)) else 0 for name, pattern in COUNTS.items()}
        if variant.spec == NEVER_DRAFTS and counts["n_drafted"]:
            raise SystemExit(f"{variant.label}: llama.cpp drafted {counts['n_drafted']} tokens in plain decoding")
        return Outcome(
            seconds=float(enc.group(2)) + float(dec.group(2)),
            decode_seconds=float(dec.group(2)),
            tokens=int(dec.group(1)),
            drafted=counts["n_drafted"],
            accepted=counts["n_accept"],
            text=done.stdout,
        )
