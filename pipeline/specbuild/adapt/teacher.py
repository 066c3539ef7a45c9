"""The teacher pass: the target answers every prompt of the traffic on the recipe's runtime, on policy, decoding with
the current head, so that each answer comes with the current head's acceptance counters for that request (the gate's
"before" on the held-out part); for the train and dev parts the target's hidden states over prompt + answer are
collected too (the final ones; EAGLE-3's captured layers). On policy: each train or dev prompt is answered with its
request's sampling settings and answer limit when the traffic gives them, greedily otherwise; the held-out part
greedily, as the gate judges it (specbuild.adapt.sampling says why).

Everything is kept in the build cache (specbuild.cache.step_store) by chunks of CHUNK records, each keyed by what it
is made from: the target's and the head's identities, the records, the answer length, each record's sampling
settings (seed included) and limit, the end id, the captured layers, the runtime and specbuild's code. A rerun with
the same inputs regenerates nothing, and an interrupted pass resumes from the chunks it finished.

    chunk/decoded.json          [{output_ids, finish_reason, draft_tokens, accepted_draft_tokens, steps, ...}, ...]
    chunk/states.safetensors    final [sum of row lengths, H] (+ captured [.., n x H]) float32, rows concatenated
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from specbuild.adapt.rows import Row
from specbuild.adapt.runtimes.base import AdaptRuntime, Decoded
from specbuild.adapt.sampling import TeacherSampling
from specbuild.adapt.traffic import Record
from specbuild.cache.step_cache import digest
from specbuild.cache.step_store import Store
from specbuild.errors import UserError
from specbuild.speculation import Speculation

FORMAT = 2  # 2: keyed by each record's sampling settings and answer limit
CHUNK = 32
STEP = "adapt-teacher"  # the build cache's step name for these entries (`specbuild cache list`)

Progress = Callable[[str], None]


@dataclass
class TeacherOutput:
    decoded: list[Decoded]  # one per record, in the order given
    rows: list[Row | None]  # teacher rows where states were asked for, else None
    reused_chunks: int
    computed_chunks: int


def _save_chunk(folder: Path, decoded: list[Decoded], rows: list[Row] | None) -> None:
    from safetensors.torch import save_file

    (folder / "decoded.json").write_text(json.dumps([d.to_dict() for d in decoded]) + "\n")
    if rows is not None:
        tensors = {"final": torch.cat([r.final for r in rows]).contiguous()}
        if rows[0].captured is not None:
            tensors["captured"] = torch.cat([r.captured for r in rows]).contiguous()
        save_file(tensors, str(folder / "states.safetensors"))


def _load_chunk(folder: Path, records: list[Record], with_states: bool) -> tuple[list[Decoded], list[Row] | None]:
    from safetensors.torch import load_file

    decoded = [Decoded(**d) for d in json.loads((folder / "decoded.json").read_text())]
    if len(decoded) != len(records):
        raise ValueError("chunk size differs")
    if not with_states:
        return decoded, None
    tensors = load_file(str(folder / "states.safetensors"))
    rows, start = [], 0
    for record, d in zip(records, decoded):
        length = len(record.ids) + len(d.output_ids)
        captured = tensors["captured"][start : start + length] if "captured" in tensors else None
        rows.append(
            Row(list(record.ids) + d.output_ids, len(record.ids), tensors["final"][start : start + length], captured)
        )
        start += length
    return decoded, rows


def teacher_pass(
    runtime: AdaptRuntime,
    spec: Speculation,
    records: list[Record],
    with_states: list[bool],
    *,
    max_tokens: int,
    end_id: int | None,
    pad_id: int | None,
    layers: tuple[int, ...] | None,
    identity: dict,
    store: Store | None,
    recipe_name: str,
    sampling: list[TeacherSampling | None] | None = None,
    limits: list[int] | None = None,
    progress: Progress | None = None,
    notice: Callable[[str], None] | None = None,
) -> TeacherOutput:
    """Answers (and, where `with_states[i]`, teacher rows) for `records`, from the cache where it holds them.
    `identity`: what else the outputs depend on (target, head, runtime, code). `sampling[i]`, `limits[i]`: how
    record i is answered (None: greedy) and its answer tokens at most (default: greedy, max_tokens)."""
    sampling = sampling if sampling is not None else [None] * len(records)
    limits = limits if limits is not None else [max_tokens] * len(records)
    say = progress or (lambda _m: None)
    decoded: list[Decoded] = []
    rows: list[Row | None] = []
    reused = computed = 0
    # chunks never mix records with and without states, so that a chunk's key says what it holds
    groups: list[tuple[bool, list[int]]] = []
    for i, wanted in enumerate(with_states):
        if groups and groups[-1][0] == wanted and len(groups[-1][1]) < CHUNK:
            groups[-1][1].append(i)
        else:
            groups.append((wanted, [i]))
    done = 0
    for states, members in groups:
        chunk = [records[i] for i in members]
        chunk_sampling = [sampling[i] for i in members]
        chunk_limits = [limits[i] for i in members]
        key = digest(
            {
                "format": FORMAT,
                "step": STEP,
                **identity,
                "records": [r.digest for r in chunk],
                "sampling": [s.to_dict() if s is not None else None for s in chunk_sampling],
                "limits": chunk_limits,
                "max_tokens": max_tokens,
                "end_id": end_id,
                "states": states,
                "layers": list(layers) if (states and layers) else None,
            }
        )
        entry = store.lookup(key) if store is not None else None
        got = None
        if entry is not None:
            try:
                got = _load_chunk(entry.output, chunk, states)
                reused += 1
            except (OSError, ValueError, KeyError, TypeError):
                got = None
        if got is None:
            answers = runtime.decode(
                spec,
                [list(r.ids) for r in chunk],
                max_tokens,
                end_id=end_id,
                pad_id=pad_id,
                sampling=chunk_sampling,
                limits=chunk_limits,
            )
            chunk_rows = None
            if states:
                full = [list(r.ids) + d.output_ids for r, d in zip(chunk, answers)]
                found = runtime.states(full, layers)
                chunk_rows = [
                    Row(tokens, len(r.ids), found.final[k], None if found.captured is None else found.captured[k])
                    for k, (r, tokens) in enumerate(zip(chunk, full))
                ]
            computed += 1
            if store is not None:
                _store(store, key, answers, chunk_rows, recipe_name, notice)
                entry = store.lookup(key)
                if entry is not None:  # train on what the cache holds: a rerun then trains on the same bytes
                    answers, chunk_rows = _load_chunk(entry.output, chunk, states)
            got = (answers, chunk_rows)
        decoded += got[0]
        rows += got[1] if got[1] is not None else [None] * len(chunk)
        done += len(chunk)
        say(f"teacher pass: {done}/{len(records)} records ({reused} chunks from the build cache)")
    return TeacherOutput(decoded, rows, reused, computed)


def _store(store: Store, key: str, answers, rows, recipe_name: str, notice) -> None:
    """Keep a chunk in the build cache; a cache that cannot be written is said, not fatal."""
    folder = Path(tempfile.mkdtemp(prefix=".adapt-teacher-"))
    try:
        _save_chunk(folder, answers, rows)
        store.put(key, folder, step=STEP, recipe=recipe_name)
    except (UserError, OSError) as e:
        if notice:
            notice(f"teacher outputs not stored in the build cache: {e}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
