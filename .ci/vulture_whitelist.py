"""Names vulture (the dead-code finder .ci/run runs over pipeline/specbuild) reports that are used where it cannot see:
each is listed once, by name, with where it is used. Anything else it reports is dead: remove it.

    vulture pipeline/specbuild .ci/vulture_whitelist.py --min-confidence 60
"""

from typing import Any

_: Any = None

# --- loaded by name ---------------------------------------------------------------------------------------------
_.TritonPythonModel  # Triton's python backend loads this class from every model.py
_.initialize  # ... and calls these members of it
_.execute
_.is_ready
_.auto_complete_config
_.ReferenceRuntime  # specbuild.runtimes.registry names the runtimes by "module:class"
_.ReferenceLlmApiRuntime
_.TrtllmRuntime
_.TrtllmLlmApiRuntime
_.PART  # a method pack names its TensorRT-LLM part by "module:object" (MethodPack.trtllm)
_.DraftTargetDecoder  # ... and its reference decoder (MethodPack.decoder)
_.TRAINER  # ... and adapt's trainer of its draft (MethodPack.trainer)
_.Eagle3Decoder
_.LookaheadDecoder
_.MedusaDecoder
_.MtpDecoder
_.PromptLookupDecoder
_.AutoDecoder
_.PardDecoder
_.SuffixAutomatonDecoder
_.BUNDLE  # a flavour names its part of the deployment bundle (Runtime.bundle)
_.cache_list  # click commands, registered by their decorators
_.cache_prune
_.doctor
_.build_cmd
_.add_stage_cmd
_.verify_cmd
_.__getattr__  # a module's lazy attributes (PEP 562)

# --- called by a library --------------------------------------------------------------------------------------
_._default_max_draft_len  # pydantic validators (model_validator / field_validator)
_._draft_length
_._choose_llm_release
_._gate_problem_at_the_field
_._text_parts_only
_._parts_leave_training_rows
_.find_class  # pickle.Unpickler's hooks (the header reader that loads no tensor)
_.persistent_load
_._stop  # contextlib.ExitStack.push's callback
_.new_type  # torch._tensor._rebuild_from_type_v2's signature, stood in for when reading headers
_.signum  # signal handlers' signature
_.frame
_.unraisable  # sys.unraisablehook's signature
_.inode  # an lru_cache key: a file's identity invalidates what was read of it
_.mtime_ns

# --- set on a library's object (the library reads it) ---------------------------------------------------------
_.unraisablehook
_.default_flow_style
_.sort_base_mapping_type_on_output
_.preserve_quotes
_._attn_implementation
_.generation_config
_.pre_tokenizer
_.post_processor
_.allow_ragged_batch

# --- fields of a schema that validates what it is given (TensorRT-LLM's arguments, read by the CPU rehearsal) ----
_.modelopt_python  # recipe/adapt.py: a recipe field (adapt's trainer: modelopt)
_.torch_dtype  # adapt/modelopt/worker.py: read by Model-Optimizer's exporter for the exported config.json
_.eagle3_model_arch
_.is_keep_all
_.is_use_oldest
_.is_public_pool
_.free_gpu_memory_fraction
_.enable_partial_reuse
_.host_cache_size
_.batch_sizes
_.enable_padding
_.tensor_parallel_size
_.pipeline_parallel_size
_.cuda_graph_config
_.triton_max_batch_size
_.EXPLICIT_DRAFT_TOKENS  # TensorRT-LLM's SpeculativeDecodingMode value (facts/engine_facts.py mirrors the enum whole)
_.output_ids  # a dataclass field (reference/decoder/request.py Result), filled positionally
_.first_level_below_1  # validate/aggregate.py Crossover's fields, read by key from its to_dict() (the reports)
_.interpolated
_.always_faster
_.slower_levels
_.faster_levels

# --- read by the tests and bench scripts (tests/, bench/) -------------------------------------------------------
_.read_manifest
_.forwards
_.full_logits
_.reused_tokens
_.probabilities
_.mask_bad_words
_.candidate_paths
_.position_offsets
_.SpeculativeDecodingMode
_.ensure_profile
_.speedups
_.never_faster
_.server_acceptance_rate
_.cpu_seconds
_.soak
_.admin_grpc_headers
_.disabled_at  # reference/decoder/speculation_gate.py: when the switch went off (tests/reference/test_speculation_gate.py)
_.overridden  # methods/suffix_automaton/enhancer.py: chains the sa_config enhancer replaced (tests/reference)
_.pard_generate  # methods/pard/decoder.py: the plain batched PARD function the executor's decoder is held to
_.speculates  # methods/auto/heuristic.py: whether the AUTO choice drafts at a load (tests/methods)
_.num_states  # methods/suffix_automaton/automaton.py: the automaton's size bounds (tests/methods)
_.num_transitions
_.origin  # trtllm/version.py TrtllmInstall: where the version was read (tests/trtllm/test_gates.py)

# --- written into a saved config, read by others' loaders ---------------------------------------------------
_.spd_type  # zoo/distill_pard.py: AMD's marker of a PARD checkpoint in the draft's config.json

# --- files copied byte for byte into every repository (their hashes are golden): left as they ship -------------
_.tensor_array

# --- unused, in files other work is changing now (validate/, output/, repository/llmapi/tensors.py, adapt/): left to it
_.per_request_acceptance_rate  # validate/aggregate.py: a summary field no report prints
_.ProgressFn  # validate/checks/base.py
_.stream_input  # validate/client/contracts.py
_.get_status  # validate/client/http_transport.py
_.LOG_FORMATS  # output/events.py
_.SPECULATIVE_COUNTERS  # repository/llmapi/tensors.py
_.describe_files  # adapt/runtimes/trtllm.py
