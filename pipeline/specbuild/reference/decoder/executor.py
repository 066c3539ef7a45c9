"""In-flight batching executor (the reference runtime's counterpart of TensorRT-LLM's executor).

    ex = Executor(engine, draft_engine=None)
    rid = ex.enqueue(Request(...))      # thread-safe; requests are checked against the engine limits here
    events = ex.step()                  # one decode iteration for every active request, then admit new ones
    ex.cancel(rid)                      # thread-safe; reported as finish_reason "cancelled" at the next step

A step first runs one decode iteration (`method.step`) over the requests already decoding (with a
draft_len_schedule, at the draft length for the number of requests this step serves: decoding + admitted), then
prefills the requests admitted this step (`method.prefill`, which yields their first tokens); those join the decoding batch
at the next step. Every decode iteration's outputs also feed the method's acceptance-rate switch
(speculation_gate.py), which can turn its drafting off for good: the rows in flight then decode with plain steps and
every later request autoregressively (group PLAIN), without the method's drafting state. Admitted requests that KV reuse left only a few tokens to prefill (the Triton BLS rounds, each a new
request that extends the previous one) join the decoding batch at once instead, where the method's step is its
prefill (autoregressive decoding): their tail rides in the same forward, as TensorRT-LLM's in-flight fused batching
mixes context and generation requests, rather than costing a forward of its own. Requests carrying external draft tokens are verified by their own prefill
(methods/external_drafts.py) and decode in a batch of their own afterwards.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

import torch

from specbuild.errors import UserError
from specbuild.reference.decoder.batch import Batch
from specbuild.reference.decoder.engine import Engine
from specbuild.reference.decoder.kv_cache import KVCache
from specbuild.reference.decoder.methods import REUSED_EXTRAS, Decoder, StepOutput, method_class
from specbuild.reference.decoder.request import Event, Request, RequestStats, Result
from specbuild.reference.decoder.prefix_store import PrefixStore
from specbuild.reference.decoder.sampling import SamplingConfig  # noqa: F401 (part of this module's API)
from specbuild.reference.decoder.sequence import Sequence

# The group of requests admitted after the acceptance-rate switch turned the engine method's speculation off for good:
# they decode autoregressively, without the method's drafting state (an EAGLE head's prefill, captured features)
PLAIN = "plain"
# An admitted request whose uncached prompt tail is at most this long joins the decoding batch's forward (rows are
# padded to the longest tail: a long prompt prefills in a forward of its own)
FUSED_PREFILL_TOKENS = 8


@dataclass
class _Group:
    """Requests decoded by one method, and their batch."""

    method: Decoder
    batch: Batch = field(default_factory=lambda: Batch([]))


class Executor:
    """enable_kv_cache_reuse: keep finished sequences' target KV and start new requests from the longest shared
    prefix (TensorRT-LLM's option of the same name; the Triton BLS loops need it to avoid re-prefilling every
    round). Off by default: one full prefill per request."""

    def __init__(self, engine: Engine, draft_engine: Engine | None = None, *, enable_kv_cache_reuse: bool = False):
        self.engine = engine
        self.draft_engine = draft_engine
        self.limits = engine.limits
        cls = method_class(engine.decoding_method)
        if cls.needs_draft_engine and draft_engine is None:
            # Drafts come from outside (the Triton BLS sends draft_tokens); plain requests decode normally.
            cls = method_class("autoregressive")
        if draft_engine is not None and not (
            engine.vocab_size <= draft_engine.vocab_size <= engine.vocab_size + cls.draft_extra_ids
        ):
            raise UserError(
                f"{draft_engine.path}: the draft vocabulary ({draft_engine.vocab_size}) differs from the target's "
                f"({engine.vocab_size}) in {engine.path}; use a draft trained with the target's tokenizer"
            )
        self.method_name = cls.name
        self._groups: dict[str, _Group] = {"engine": _Group(cls(engine, draft_engine))}
        if engine.accepts_external_drafts:
            self._groups["external"] = _Group(method_class("external_drafts")(engine))

        self.prefix_store = PrefixStore() if enable_kv_cache_reuse else None

        self._lock = threading.Lock()
        self._pending: deque[tuple[int, Request]] = deque()
        self._cancelled: set[int] = set()
        self._cancelled_pending: list[int] = []
        self._next_id = 1

    # ------------------------------------------------------------------ thread-safe API
    def enqueue(self, request: Request) -> int:
        """Check a request against the engine and queue it; returns its id. Raises UserError if it cannot run."""
        self._check(request)
        with self._lock:
            rid = self._next_id
            self._next_id += 1
            self._pending.append((rid, request))
        return rid

    def cancel(self, request_id: int) -> None:
        with self._lock:
            for i, (rid, _) in enumerate(self._pending):
                if rid == request_id:
                    del self._pending[i]
                    self._cancelled_pending.append(rid)
                    return
            self._cancelled.add(request_id)

    def has_work(self) -> bool:
        with self._lock:
            if self._pending or self._cancelled_pending:
                return True
        return any(len(g.batch) for g in self._groups.values())

    @property
    def num_active(self) -> int:
        return sum(len(g.batch) for g in self._groups.values())

    # ------------------------------------------------------------------ the loop (one thread)
    def step(self) -> list[Event]:
        """One iteration: decode every active request once (admitted ones with a short uncached tail among them),
        then prefill the other admitted ones (they emit their first token now and decode from the next step on)."""
        with self._lock:
            cancelled, self._cancelled = self._cancelled, set()
            events = [Event(rid, [], True, "cancelled", RequestStats()) for rid in self._cancelled_pending]
            self._cancelled_pending = []
            admitted = self._admit()
        in_flight = self.num_active + sum(len(seqs) for seqs in admitted.values())
        for name, group in self._groups.items():
            group.method.follow_load(in_flight)  # adaptive speculation: the draft length for this many requests
            events += self._drop_finished(group, cancelled)
            joined, alone = self._admit_to(group, admitted.get(name, []))
            events += self._decode(group, joined)
            if alone.seqs:  # prefilled in a forward of their own; they decode from the next step
                events += self._apply(alone, group.method.prefill(alone))
                events += self._drop_finished(_Group(group.method, alone))
                group.batch.extend(alone)
        return events

    def _admit_to(self, group: _Group, seqs: list[Sequence]) -> tuple[set[int], Batch]:
        """Start the admitted rows' caches (KV reuse). Where the method's step is its prefill and every row has at
        most FUSED_PREFILL_TOKENS left to prefill, the rows join the decoding batch now: returns their request ids
        and an empty batch. Otherwise no ids, and the rows as a batch of their own to prefill."""
        batch = Batch(seqs)
        if not seqs:
            return set(), batch
        self._reuse_prefixes(_Group(group.method, batch))
        if not (group.method.joins_running_batch() and len(group.batch)):
            return set(), batch
        cached = batch.caches.get("target")
        tails = [len(seq.tokens) - (cached.lengths[r] if cached else 0) for r, seq in enumerate(seqs)]
        if max(tails) > FUSED_PREFILL_TOKENS:
            return set(), batch
        batch.cache("target", group.method.target)
        group.method.join(batch)
        group.batch.extend(batch)
        return {seq.request_id for seq in seqs}, Batch([])

    def _decode(self, group: _Group, joined: set[int]) -> list[Event]:
        """One step of the decoding batch; the rows in `joined` were admitted into it and this is their prefill."""
        if not len(group.batch):
            return []
        outputs = group.method.step(group.batch)
        for seq, out in zip(group.batch.seqs, outputs):
            if seq.request_id in joined:
                out.counts_as_step = False
        group.method.record_acceptance(outputs)  # the acceptance-rate switch: one sample per iteration that drafted
        events = self._apply(group.batch, outputs)
        return events + self._drop_finished(group)

    def run(self, requests: list[Request]) -> list[Result]:
        """Convenience: enqueue all, step until every one finished; results in request order."""
        ids = [self.enqueue(r) for r in requests]
        done: dict[int, Result] = {}
        outputs: dict[int, list[int]] = {rid: [] for rid in ids}
        log_probs: dict[int, list] = {rid: [] for rid in ids}
        while self.has_work():
            for ev in self.step():
                if ev.request_id in outputs:
                    outputs[ev.request_id] += ev.new_tokens
                    log_probs[ev.request_id] += ev.log_probs
                    if ev.finished:
                        done[ev.request_id] = Result(
                            ev.request_id,
                            outputs[ev.request_id],
                            ev.finish_reason,
                            ev.stats,
                            log_probs[ev.request_id],
                            ev.cum_log_prob,
                        )
        return [done[rid] for rid in ids]

    # ------------------------------------------------------------------ internals
    def _admit(self) -> dict[str, list[Sequence]]:
        """Take pending requests while the batch has room (max_batch_size) and the prefill fits max_num_tokens."""
        room = self.limits.max_batch_size - self.num_active
        tokens = 0
        admitted: dict[str, list[Sequence]] = {}
        while self._pending and room > 0:
            rid, request = self._pending[0]
            cost = len(request.input_ids) + len(request.draft_tokens or ())
            if tokens and tokens + cost > self.limits.max_num_tokens:
                break
            self._pending.popleft()
            tokens += cost
            room -= 1
            group = "external" if request.draft_tokens else self._engine_group()
            admitted.setdefault(group, []).append(Sequence.start(rid, request))
        return admitted

    def _engine_group(self) -> str:
        """Where a plain request goes: the engine's method, or, once its acceptance-rate switch turned speculation
        off (it never turns back on), a group decoding without the method's drafting state."""
        if not self._groups["engine"].method.speculation_off:
            return "engine"
        if PLAIN not in self._groups:
            self._groups[PLAIN] = _Group(method_class("autoregressive")(self.engine, None, {}))
        return PLAIN

    def _apply(self, batch: Batch, outputs: list[StepOutput]) -> list[Event]:
        if len(outputs) != len(batch.seqs):
            raise RuntimeError(f"the method returned {len(outputs)} outputs for {len(batch.seqs)} rows")
        events = []
        for seq, out in zip(batch.seqs, outputs):
            if out.counts_as_step:
                seq.stats.record_step(out.drafted, out.accepted)
            if seq.request.return_log_probs and (out.log_probs is None or len(out.log_probs) != len(out.tokens)):
                raise RuntimeError(
                    f"{self.method_name}: the request asks for log probs but the method gave "
                    f"{None if out.log_probs is None else len(out.log_probs)} for {len(out.tokens)} tokens"
                )
            emitted = seq.append(out.tokens, out.log_probs if seq.request.return_log_probs else None)
            finished = seq.finish_reason is not None
            log_probs = seq.log_probs[len(seq.log_probs) - len(emitted) :] if seq.request.return_log_probs else []
            events.append(
                Event(
                    seq.request_id,
                    emitted,
                    finished,
                    seq.finish_reason,
                    seq.stats.snapshot(),
                    log_probs=log_probs,
                    cum_log_prob=seq.cum_log_prob,
                )
            )
        return events

    def _drop_finished(self, group: _Group, cancelled: set[int] = frozenset()) -> list[Event]:
        """Take the finished rows out of the batch (their KV into the prefix store, with KV reuse); rows whose
        request was cancelled finish here first. Returns the cancellations' events."""
        batch = group.batch
        events = []
        for seq in batch.seqs:
            if seq.request_id in cancelled:
                seq.finish_reason = "cancelled"
                events.append(Event(seq.request_id, [], True, "cancelled", seq.stats.snapshot()))
        keep = [r for r, seq in enumerate(batch.seqs) if seq.finish_reason is None]
        if len(keep) == len(batch.seqs):
            return events
        if self._reuses(group) and "target" in batch.caches:
            cache = batch.caches["target"]
            for r, seq in enumerate(batch.seqs):
                if seq.finish_reason is not None and cache.lengths[r] > 0:
                    self.prefix_store.put(
                        seq.tokens[: cache.lengths[r]], cache.row_kv(r), group.method.kept_extras(seq, cache.lengths[r])
                    )
        batch.select(keep)
        return events

    def _reuses(self, group: _Group) -> bool:
        return self.prefix_store is not None and group.method.reuses_prefix

    def _reuse_prefixes(self, group: _Group) -> None:
        """Start the target cache of newly admitted rows from kept prefixes (when KV reuse is on)."""
        if not self._reuses(group):
            return
        needs = group.method.prefix_extras()
        found = [self.prefix_store.longest_prefix(seq.tokens, needs) for seq in group.batch.seqs]
        for seq, (n, _, extras) in zip(group.batch.seqs, found):
            seq.stats.reused_prompt_tokens = n
            if n and needs:
                seq.state[REUSED_EXTRAS] = {name: value[:n] for name, value in extras.items()}
        if any(n > 0 for n, _, _ in found):
            group.batch.caches["target"] = KVCache.from_rows(self.engine.model.config, [(n, kv) for n, kv, _ in found])

    def _check(self, req: Request) -> None:
        lim, vocab = self.limits, self.engine.vocab_size
        where = f"request for engine {self.engine.path}"
        if not req.input_ids:
            raise UserError(f"{where}: input_ids is empty")
        bad = [t for t in req.input_ids if not 0 <= int(t) < vocab]
        if bad:
            raise UserError(f"{where}: input_ids has token ids outside the vocabulary [0, {vocab}): {bad[:5]}")
        if len(req.input_ids) > lim.max_input_len:
            raise UserError(
                f"{where}: the prompt has {len(req.input_ids)} tokens, more than the engine's max_input_len="
                f"{lim.max_input_len}; shorten it or rebuild with a larger build.max_input_len"
            )
        if req.max_new_tokens < 1:
            raise UserError(f"{where}: max_new_tokens={req.max_new_tokens} must be >= 1")
        if len(req.input_ids) + req.max_new_tokens > lim.requested_max_seq_len:
            raise UserError(
                f"{where}: prompt ({len(req.input_ids)}) + max_new_tokens ({req.max_new_tokens}) = "
                f"{len(req.input_ids) + req.max_new_tokens} exceeds the engine's max_seq_len={lim.requested_max_seq_len}; "
                "ask for fewer tokens or rebuild with a larger build.max_seq_len"
            )
        problems = req.sampling.problems()
        if problems:
            raise UserError(f"{where}: sampling: {'; '.join(problems)}")
        if req.min_tokens < 0:
            raise UserError(f"{where}: min_tokens={req.min_tokens} must be >= 0 (0 = no minimum)")
        for name in ("end_id", "pad_id"):
            value = getattr(req, name)
            if value is not None and not 0 <= value < vocab:
                raise UserError(f"{where}: {name}={value} is outside the vocabulary [0, {vocab})")
        for name in ("stop_words", "bad_words"):
            for word in getattr(req, name):
                if not word or any(not 0 <= t < vocab for t in word):
                    raise UserError(
                        f"{where}: {name} entry {word!r} must be a non-empty list of token ids in [0, {vocab})"
                    )
        self._check_drafts(req, where)

    def _check_drafts(self, req: Request, where: str) -> None:
        if not req.draft_tokens:
            if req.draft_logits is not None:
                raise UserError(f"{where}: draft_logits given without draft_tokens")
            return
        if not self.engine.accepts_external_drafts:
            raise UserError(
                f"{where}: draft_tokens given, but the engine was built with speculative_decoding_mode "
                f"{self.engine.mode.name} (draft tokens need draft_tokens_external: method draft_target or prompt_lookup)"
            )
        k = len(req.draft_tokens)
        if k > self.limits.max_draft_len:
            raise UserError(f"{where}: {k} draft tokens exceed the engine's max_draft_len={self.limits.max_draft_len}")
        if any(not 0 <= t < self.engine.vocab_size for t in req.draft_tokens):
            raise UserError(f"{where}: draft_tokens has ids outside the vocabulary [0, {self.engine.vocab_size})")
        if req.draft_logits is not None:
            shape = tuple(torch.as_tensor(req.draft_logits).shape)
            if shape != (k, self.engine.vocab_size):
                raise UserError(
                    f"{where}: draft_logits has shape {shape}, expected ({k}, {self.engine.vocab_size}) "
                    "(one row of vocabulary logits per draft token)"
                )
