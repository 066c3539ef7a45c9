"""The build cache: each step's key (what it reads), the content-addressed store of outputs, and the
provenance manifest every output folder carries."""
