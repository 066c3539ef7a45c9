"""Facts every stage shares, once: engine facts and limits, speculation trees, the CPU, the acceptance metrics
and the cost model of speculative decoding."""
