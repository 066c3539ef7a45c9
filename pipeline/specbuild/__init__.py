"""specbuild: one YAML recipe in; speculative-decoding engines, a Triton repository and a validation report out."""

__version__ = "0.1.0"
