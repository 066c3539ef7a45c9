"""Prometheus metrics of specbuild's Triton python models, through the python backend's custom metrics
(`pb_utils.MetricFamily`; they appear on Triton's metrics endpoint next to its nv_inference_* families). Copied
into each python model's 1/ folder by the repository writer.

Two groups:
- `BatcherMetrics`: the `nv_trt_llm_*` gauges of TensorRT-LLM's C++ backend that the reference tensorrt_llm can
  fill honestly, with upstream's family names, descriptions and labels (tensorrtllm_backend README "Triton
  Metrics"; ci/L0_backend_trtllm/custom_metrics_verification_tests.py): request counts, KV-cache usage, in-flight
  batcher figures, the iteration counter. Families the reference runtime has nothing true to say about (runtime
  memory, disaggregated serving) are not exported.
- `SpeculationMetrics`: speculative-decoding counters upstream lacks, named after vLLM's spec_decode metrics
  (vllm/v1/spec_decode/metrics.py): drafts (verification steps that checked at least one draft token), draft
  tokens, accepted tokens, accepted tokens per draft position (label `position`, 0 = the first draft token),
  plus the verification steps (with or without drafts), the denominator of specbuild's mean acceptance length:
      AL = 1 + rate(specbuild_spec_decode_num_accepted_tokens_total) / rate(specbuild_spec_decode_num_steps_total)
Every metric carries the labels model and version, as Triton's own families do.
"""

import threading
import time

SPEC_PREFIX = "specbuild_spec_decode_"
SPEC_COUNTERS = {
    "num_drafts_total": "Verification steps that checked at least one draft token (vLLM's num_drafts)",
    "num_draft_tokens_total": "Draft tokens proposed for verification",
    "num_accepted_tokens_total": "Draft tokens accepted by the target",
    "num_steps_total": "Verification steps (target forwards after the prefill; with external drafts the prefill "
                       "is the first step), with or without draft tokens",
}
PER_POSITION = "num_accepted_tokens_per_pos_total"
PER_POSITION_HELP = "Draft tokens accepted at each draft position (label position, 0 = first)"

# upstream's families: (name, description, label key, label values)
REQUEST_FAMILY = ("nv_trt_llm_request_metrics", "TRT LLM request metrics", "request_type",
                  ("active", "max", "scheduled", "context", "waiting"))
KV_FAMILY = ("nv_trt_llm_kv_cache_block_metrics", "TRT LLM KV cache block metrics", "kv_cache_block_type",
             ("tokens_per", "used"))
BATCHER_FAMILY = ("nv_trt_llm_inflight_batcher_metrics", "TRT LLM inflight_batcher-specific metrics",
                  "inflight_batcher_specific_metric",
                  ("paused_requests", "micro_batch_id", "generation_requests", "total_context_tokens"))
GENERAL_FAMILY = ("nv_trt_llm_general_metrics", "General TRT LLM metrics", "general_type",
                  ("iteration_counter", "timestamp"))


# Every metric update goes through this lock: concurrent Metric.increment / set calls from several threads (the
# BLS serves rows on a thread pool) crash the python backend stub (seen with nvidia-pytriton's tritonserver 2.51).
_LOCK = threading.Lock()


def _pb():
    import triton_python_backend_utils as pb_utils

    return pb_utils


class _Family:
    """One metric family and its metrics by label value. The families are kept as attributes: a MetricFamily
    that is garbage-collected invalidates its metrics (seen with nvidia-pytriton's tritonserver)."""

    def __init__(self, name, description, kind, labels, key=None, values=()):
        pb_utils = _pb()
        self.family = pb_utils.MetricFamily(name=name, description=description,
                                            kind=getattr(pb_utils.MetricFamily, kind))
        self.labels = labels
        self.key = key
        self.metrics = {}
        for value in values:
            self.metric(value)

    def metric(self, value=None):
        if value not in self.metrics:
            labels = dict(self.labels)
            if self.key is not None:
                labels[self.key] = str(value)
            self.metrics[value] = self.family.Metric(labels=labels)
        return self.metrics[value]


class SpeculationMetrics:
    """Speculative-decoding counters of one model instance (every instance adds to the same counters)."""

    def __init__(self, model, version="1"):
        labels = {"model": model, "version": str(version)}
        self.families = {name: _Family(SPEC_PREFIX + name, text, "COUNTER", labels) for name, text in SPEC_COUNTERS.items()}
        self.counters = {name: family.metric() for name, family in self.families.items()}
        self.per_position = _Family(SPEC_PREFIX + PER_POSITION, PER_POSITION_HELP, "COUNTER", labels, "position")

    def observe_step(self, drafted, accepted):
        """One verification step that checked `drafted` draft tokens and accepted the first `accepted`."""
        self.observe(1, 1 if drafted else 0, drafted, accepted, [1] * accepted)

    def observe(self, steps, drafts, draft_tokens, accepted, per_position):
        """Totals of several steps; per_position[i]: steps that accepted the draft at position i. Never raises:
        a metric that cannot be updated must not fail the request."""
        try:
            with _LOCK:
                self._observe(steps, drafts, draft_tokens, accepted, per_position)
        except Exception as e:  # noqa: BLE001
            import sys

            print(f"specbuild metrics: {type(e).__name__}: {e}", file=sys.stderr)

    def _observe(self, steps, drafts, draft_tokens, accepted, per_position):
        for name, value in (("num_steps_total", steps), ("num_drafts_total", drafts),
                            ("num_draft_tokens_total", draft_tokens), ("num_accepted_tokens_total", accepted)):
            if value:
                self.counters[name].increment(int(value))
        for position, count in enumerate(per_position):
            if count:
                self.per_position.metric(position).increment(int(count))

    def observe_request(self, stats):
        """A finished executor request's RequestStats (specbuild.reference.decoder.request)."""
        drafted = getattr(stats, "drafted_per_step", None) or []
        self.observe(stats.steps, sum(1 for d in drafted if d > 0), stats.total_draft_tokens,
                     stats.total_accepted_draft_tokens, stats.per_position_accepted)


class BatcherMetrics:
    """The nv_trt_llm_* gauges of the reference tensorrt_llm, set after every executor iteration."""

    def __init__(self, model, version="1", *, max_requests, tokens_per_block=1):
        labels = {"model": model, "version": str(version)}
        self.families = {spec[0]: _Family(spec[0], spec[1], "GAUGE", labels, spec[2], spec[3])
                         for spec in (REQUEST_FAMILY, KV_FAMILY, BATCHER_FAMILY, GENERAL_FAMILY)}
        self.tokens_per_block = max(1, int(tokens_per_block))
        self.iterations = 0
        self.set(REQUEST_FAMILY, "max", max_requests)
        self.set(KV_FAMILY, "tokens_per", self.tokens_per_block)
        self.set(BATCHER_FAMILY, "micro_batch_id", 0)  # no pipeline-parallel micro batches
        self.set(BATCHER_FAMILY, "paused_requests", 0)  # the reference executor never pauses a request
        self.set(GENERAL_FAMILY, "timestamp", time.time_ns() // 1000)

    def set(self, family, value, number):
        with _LOCK:
            self.families[family[0]].metric(value).set(float(number))

    def iteration(self, *, waiting, context, generation, context_tokens, active, kv_tokens, publish=True):
        """After one executor step: requests waiting for admission, requests prefilled (context) and decoded
        (generation) in it, the prompt tokens it prefilled, the requests still active, and the KV-cache tokens
        the active requests hold (reported in blocks of tokens_per_block). publish=False only counts the
        iteration (the gauges keep the last published step's values, as a periodic stats poll shows them)."""
        self.iterations += 1
        if not publish:
            return
        blocks = sum(-(-n // self.tokens_per_block) for n in kv_tokens)
        for family, value, number in ((REQUEST_FAMILY, "waiting", waiting), (REQUEST_FAMILY, "context", context),
                                      (REQUEST_FAMILY, "scheduled", context + generation),
                                      (REQUEST_FAMILY, "active", active), (KV_FAMILY, "used", blocks),
                                      (BATCHER_FAMILY, "generation_requests", generation),
                                      (BATCHER_FAMILY, "total_context_tokens", context_tokens),
                                      (GENERAL_FAMILY, "iteration_counter", self.iterations),
                                      (GENERAL_FAMILY, "timestamp", time.time_ns() // 1000)):
            self.set(family, value, number)


def metrics_or_none(make, log_name):
    """Build metrics, or None (with one line on stderr) where the python backend has no custom metrics."""
    try:
        return make()
    except Exception as e:  # noqa: BLE001 - metrics must never keep a model from loading
        import sys

        print(f"{log_name}: custom metrics unavailable ({type(e).__name__}: {e}); serving without them",
              file=sys.stderr)
        return None
