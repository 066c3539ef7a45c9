"""TEST DOUBLE of NVIDIA's llmapi helpers.py (request-to-SamplingParams helpers); unused by the double's model."""
