"""Modules that run without specbuild: the repository writer copies them beside our Triton Python models, which run
in NVIDIA's containers where specbuild is not installed, so they import the standard library only. specbuild imports
the same files (one definition for the served models and the rest of the package).

    model_parameters.py      the one parser of config.pbtxt parameters
    request_checks.py        sampling values checked where they enter (the `*_ok` rules of both request contracts)
    serving_metrics.py       the Prometheus families the models export
    prompt_lookup_drafts.py  prompt-lookup drafting (the BLS and the reference runtime)
    draft_len_schedule.py    adaptive speculation's draft length per batch size (the BLS and the reference runtime)
"""

from pathlib import Path

FOLDER = Path(__file__).resolve().parent
