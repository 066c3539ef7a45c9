"""specbuild adapt: adapt the draft to the team's own traffic, and ship the new head only when it measurably beats the
old one on held-out traffic (docs/adapt.md).

    specbuild adapt RECIPE --traffic FILE --out DIR      # or the recipe's `adapt:` section, run by compile

    traffic.py   the traffic as validate reads, formats and the server tokenizes it
    split.py     per category: train, dev (early stopping), held-out (the gate), by record digest
    teacher.py   the target's answers (and hidden states) on the recipe's runtime, kept in the build cache
    rows.py      teacher rows padded for the zoo's losses
    heads/       one trainer per draft kind (EAGLE-1/2, EAGLE-3, Medusa, draft model), by speculation params type
    train.py     the zoo's AdamW loop with max_steps, max_minutes and early stopping on dev acceptance
    gate.py      paired bootstrap of (new - old) held-out AL; per-category drop; lossless answers
    runtimes/    the runtime side: reference (CPU, run here), TensorRT-LLM LLM API (GPU, docs/gpu.md)
    modelopt.py  NVIDIA Model-Optimizer's EAGLE-3 training in its own virtual environment (optional)
    recipe_out.py, report.py, run.py: DIR/recipe.yaml, the reports, one run

Layer: above validate, reference and zoo, below compile (pyproject.toml [tool.importlinter])."""
