"""The Triton model repository a recipe is served from, in the flavour its runtime speaks:

    engine/   the ensemble/BLS repository over engine folders (TensorRT-LLM's engine path): preprocessing,
              tensorrt_llm (+ tensorrt_llm_draft), postprocessing, ensemble, tensorrt_llm_bls; our model.py sources
              of the models both runtimes share (engine/models/); the core model is the runtime's
    llmapi/   the LLM-API repository: one tensorrt_llm Python model configured by model.yaml

Both write config.pbtxt as protobuf messages and every repository atomically (specbuild.files.atomic).
"""
