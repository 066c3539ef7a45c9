"""Adaptive speculation, defined once: a draft length that follows the number of requests in flight.

A schedule maps batch sizes to draft lengths, as TensorRT-LLM 1.2's `speculative_config.draft_len_schedule`
(llm_args.py `DecodingBaseConfig.draft_len_schedule`: "{1: 4, 4: 2, 8: 0} means: batch_size >= 1 uses
draft_len=4, batch_size >= 4 uses draft_len=2, batch_size >= 8 uses draft_len=0 (disable speculation)"; the
drafter takes the value of the largest key <= the batch size, `Drafter.get_draft_len_for_batch_size`). Its rules
(`validate_draft_len_schedule_and_sort`): keys >= 1, values >= 0, key 1 present and equal to the full draft
length, no value above it.

The reference runtime imports this module; the repository writer copies it beside our Triton BLS (which runs in
NVIDIA's containers where specbuild is not installed). Standard library only.

Text form (Triton parameter `draft_len_schedule`, engine folders): "1:4,4:2,8:0"; JSON objects ('{"1": 4}') and
mappings are read too.
"""

import json

PARAMETER = "draft_len_schedule"  # the config.pbtxt parameter and the specbuild.decoding key


def schedule_problems(mapping, full=None):
    """TensorRT-LLM 1.2's rules for a schedule (keys and values already integers) as (key or None, message)
    pairs with the fix; `full` is the method's full draft length (None: not known here)."""
    problems = []
    if not mapping:
        return [(None, "is empty — give at least {1: <full draft length>}")]
    for key, value in sorted(mapping.items()):
        if key < 1:
            problems.append((key, f"batch size {key} must be >= 1 (batch size threshold must be >= 1)"))
        if value < 0:
            problems.append((key, f"draft length {value} must be >= 0 (0 turns speculation off)"))
        elif full is not None and value > full:
            problems.append((key, f"draft length {value} exceeds the full draft length {full} (all draft "
                                  f"lengths must be <= max_draft_len) — lower it"))
    if 1 not in mapping:
        problems.append((None, f"has no entry for batch size 1 — add {{1: {full if full is not None else 'N'}}} "
                               "(draft_len_schedule must include batch_size=1)"))
    elif full is not None and mapping[1] != full:
        problems.append((1, f"batch size 1 maps to {mapping[1]} but the full draft length is {full}; batch size 1 "
                            f"uses the full draft length (draft_len_schedule[1] must equal max_draft_len) — set "
                            f"1: {full}"))
    return problems


def parse(value):
    """A schedule from text ("1:4,4:2,8:0" or a JSON object) or a mapping -> sorted list of (batch size, draft
    length); ValueError says what is wrong."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("{"):
            value = json.loads(text)
        else:
            value = {}
            for item in (part.strip() for part in text.split(",")):
                if not item:
                    continue
                key, sep, length = item.partition(":")
                if not sep:
                    raise ValueError(f"{item!r} is not 'batch size:draft length' (e.g. 1:4,4:2,8:0)")
                value[key.strip()] = length.strip()
    if not isinstance(value, dict):
        raise ValueError(f"expected a mapping of batch size to draft length, got {type(value).__name__}")
    out = {}
    for key, length in value.items():
        try:
            out[int(key)] = int(length)
        except (TypeError, ValueError):
            raise ValueError(f"{key!r}: {length!r} is not an integer batch size and draft length") from None
    problems = schedule_problems(out)
    if problems:
        raise ValueError("; ".join(message for _, message in problems))
    return sorted(out.items())


def draft_length(points, requests):
    """The draft length for `requests` in flight: the value of the largest batch size <= requests (the first
    entry's below 1). `points`: parse()'s sorted pairs."""
    length = points[0][1]
    for batch_size, value in points:
        if batch_size > requests:
            break
        length = value
    return length


def as_text(points):
    return ",".join(f"{batch_size}:{length}" for batch_size, length in points)


def upper_bound_form(points, max_batch_size):
    """The same schedule in the spelling of TensorRT-LLM after 1.2 (PR #10860, `get_draft_len_for_batch_size` in
    speculative/utils.py: each key is the largest batch size its value applies to, batch sizes above the last
    key draft nothing). Exact for batch sizes 1..max_batch_size; trailing zeros are implicit there."""
    out = {}
    for i, (batch_size, length) in enumerate(points):
        last = points[i + 1][0] - 1 if i + 1 < len(points) else max_batch_size
        if batch_size <= max_batch_size and length > 0:
            out[min(last, max_batch_size)] = length
    return out


def max_concurrency(points):
    """The `max_concurrency` that says the same (speculation at full length up to N requests, none above), or
    None when no such N does (a schedule that never turns speculation off, or shortens the drafts on the way)."""
    full = points[0][1]
    off = next((batch_size for batch_size, length in points if length == 0), None)
    if off is None or any(length not in (0, full) for _, length in points):
        return None
    if any(length != 0 for batch_size, length in points if batch_size >= off):
        return None
    return off - 1
