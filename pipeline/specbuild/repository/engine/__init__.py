"""The engine flavour's repository: an ensemble/BLS repository over engine folders, the same for both runtimes but
for the core model (`tensorrt_llm`, and `tensorrt_llm_draft` for draft-target), whose backend and model.py are the
runtime's."""
