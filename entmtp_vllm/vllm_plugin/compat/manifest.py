"""`MANIFEST`: every piece of vLLM the plugin relies on, one entry each, with the part of the
plugin that breaks without it (`used_by`), and the names of the vLLM modules the entries name.

Written by reading every module of `entmtp_vllm/vllm_plugin/` (the platform-free modules, `cpu/`
and `cuda/`), `entmtp_vllm/cpu_gemm/vllm_gemm.py`, the `vllm serve` options and environment
variables `entmtp serve` uses, and the vLLM imports of `bench/` and `training/`;
`tests/vllm_plugin/test_compat.py` keeps it matched to the code (every override of a vLLM method,
every `from vllm... import`).
"""

from __future__ import annotations

from entmtp_vllm.vllm_plugin.compat.entries import (
    Attribute,
    Call,
    CallSite,
    Constant,
    Entry,
    Expression,
    Import,
    KwargRead,
    Override,
    Returns,
    Settable,
    Value,
)

GMR = "vllm.v1.worker.gpu_model_runner"
CMR = "vllm.v1.worker.cpu_model_runner"
GW = "vllm.v1.worker.gpu_worker"
CW = "vllm.v1.worker.cpu_worker"
IB = "vllm.v1.worker.gpu_input_batch"
BT = "vllm.v1.worker.block_table"
WU = "vllm.v1.worker.utils"
CPU_ATTN = "vllm.v1.attention.backends.cpu_attn"
FLASH = "vllm.v1.attention.backends.flash_attn"
TRITON = "vllm.v1.attention.backends.triton_attn"
REGISTRY = "vllm.v1.attention.backends.registry"
BACKEND = "vllm.v1.attention.backend"
LAYER = "vllm.model_executor.layers.attention.attention"
OPS = "vllm._custom_ops"
OUTPUTS = "vllm.v1.outputs"
SCHED = "vllm.v1.core.sched.output"
SPEC_META = "vllm.v1.spec_decode.metadata"
KV_IFACE = "vllm.v1.kv_cache_interface"
COMPILATION = "vllm.config.compilation"
DISPATCHER = "vllm.v1.cudagraph_dispatcher"
ARGS = "vllm.engine.arg_utils"
PLATFORM = "vllm.platforms.interface"
CPU_PLATFORM = "vllm.platforms.cpu"
CUDA_PLATFORM = "vllm.platforms.cuda"
MULTIPROC = "vllm.v1.executor.multiproc_executor"
CORE = "vllm.v1.engine.core"
LAYER_UTILS = "vllm.model_executor.layers.utils"
LOGGER = "vllm.logger"
SAMPLING = "vllm.sampling_params"
VLLM_CONFIG = "vllm.config.vllm"
MODEL_CONFIG = "vllm.config.model"
CACHE_CONFIG = "vllm.config.cache"
ATTN_CONFIG = "vllm.config.attention"
PARALLEL_CONFIG = "vllm.config.parallel"
SPEC_CONFIG = "vllm.config.speculative"
CUSTOM_PROPOSER = "vllm.v1.spec_decode.custom_class_proposer"
V1_UTILS = "vllm.v1.utils"
ENVS = "vllm.envs"
PLUGINS = "vllm.plugins"
SAMPLER = "vllm.v1.sample.sampler"
TOPK_TOPP = "vllm.v1.sample.ops.topk_topp_sampler"
LOGITSPROCS = "vllm.v1.sample.logits_processor"
BUILTIN_PROCS = "vllm.v1.sample.logits_processor.builtin"
TORCH_UTILS = "vllm.utils.torch_utils"

_RUNNER_OVERRIDES = (
    ("__init__", "tree_runner: attaches the EntMTP proposer to the runner"),
    ("initialize_attn_backend", "tree_runner: start-up checks (one KV cache group, the tree backend)"),
    ("execute_model", "tree_runner: step timing (the step-cost model)"),
    ("sample_tokens", "tree_runner: step timing; drafts attached to the output (draft_handoff)"),
    ("_update_states", "tree_runner: frees finished / preempted requests' proposals"),
    ("_prepare_inputs", "tree_runner: the step plan (tree positions, TreeStep)"),
    ("_build_attention_metadata", "tree_runner: TreeStep handed to every attention layer"),
    ("_sample", "tree_runner: tree verification (acceptance, compaction)"),
    ("propose_draft_token_ids", "tree_runner: drafting the next trees"),
)


def _runner_overrides() -> tuple[Override, ...]:
    return tuple(
        Override(module, f"{cls}.{method}", f"TreeRunnerMixin.{method}", used_by)
        for module, cls in ((GMR, "GPUModelRunner"), (CMR, "CPUModelRunner"))
        for method, used_by in _RUNNER_OVERRIDES
    )


def _attributes(module: str, owner: str, used_by: str, *names: str) -> tuple[Attribute, ...]:
    return tuple(Attribute(module, owner, name, used_by) for name in names)


MANIFEST: tuple[Entry, ...] = (
    # ------------------------------------------------------------------ imports
    Import(GMR, "GPUModelRunner", "cuda model_runner: EntMTPGPUModelRunner's base"),
    Import(CMR, "CPUModelRunner", "cpu model_runner: EntMTPCPUModelRunner's base"),
    Import(COMPILATION, "CUDAGraphMode", "cuda model_runner: FULL graphs kept off tree steps"),
    Import(CW, None, "cpu worker: EntMTPCPUWorker rebinds cpu_worker.CPUModelRunner"),
    Import(CW, "CPUWorker", "cpu worker: EntMTPCPUWorker's base"),
    Import(CW, "CPUModelRunner", "cpu worker: the name EntMTPCPUWorker.init_device rebinds"),
    Import(GW, "Worker", "cuda worker: EntMTPGPUWorker's base"),
    Import(LOGGER, "init_logger", "cpu / cuda worker, tree_runner, cpu_gemm.vllm_gemm: logging under vllm"),
    Import(OUTPUTS, "ModelRunnerOutput", "tree_runner: drafts attached to the step's output"),
    Import(OUTPUTS, "SamplerOutput", "tree_runner: verification's result"),
    Import("vllm", "_custom_ops", "cpu attention / rows: vLLM's CPU attention ops"),
    Import(LAYER, "get_attention_context", "cpu attention: TreeStep of a layer in do_kv_cache_update"),
    Import(BACKEND, "AttentionType", "cpu / cuda attention, cuda warmup: decoder layers only"),
    Import(CPU_ATTN, "CPUAttentionBackend", "cpu attention: TreeCPUAttentionBackend's base"),
    Import(CPU_ATTN, "CPUAttentionBackendImpl", "cpu attention: TreeCPUAttentionImpl's base"),
    Import(CPU_ATTN, "CPUAttentionMetadata", "cpu attention: the CPU step metadata"),
    Import(FLASH, "FlashAttentionBackend", "cuda attention: TreeFlashAttentionBackend's base"),
    Import(FLASH, "FlashAttentionImpl", "cuda attention: TreeFlashAttentionImpl's base"),
    Import(TRITON, "TritonAttentionBackend", "cuda attention: TreeTritonAttentionBackend's base"),
    Import(TRITON, "TritonAttentionImpl", "cuda attention: TreeTritonAttentionImpl's base"),
    Import(MULTIPROC, "MultiprocExecutor", "draft_handoff: drafts answered from the step's output"),
    Import(ARGS, "EngineArgs", "install: the `method: entmtp` form"),
    Import(SAMPLING, "SamplingParams", "install: min_p and logit_bias let through for EntMTP engines"),
    Import(LOGITSPROCS, "BUILTIN_LOGITS_PROCESSORS", "tree_runner: vLLM's builtin processors built for EntMTP engines"),
    Import(LOGITSPROCS, "LogitsProcessors", "tree_runner: vLLM's builtin processors built for EntMTP engines"),
    Import(TORCH_UTILS, "PIN_MEMORY", "tree_runner: the builtin processors built as vLLM builds them"),
    Import(TOPK_TOPP, "apply_top_k_top_p", "sampled_rows: vLLM's top-k / top-p for unseeded rows drawn on a CPU"),
    Import(REGISTRY, "AttentionBackendEnum", "backends, cuda configure: the backend names"),
    Import(REGISTRY, "register_backend", "backends: tree attention backends"),
    Import("vllm.platforms", "current_platform", "install, cpu ray_device: platform config checks, Ray device"),
    Import("vllm.model_executor.layers", "utils", "cpu_gemm.vllm_gemm: packed CPU GEMM"),
    Import("vllm", "LLM", "bench.in_process, training.selfdistill_data: in-process engines"),
    Import("vllm", "SamplingParams", "bench.in_process, training.selfdistill_data"),
    Import("vllm.inputs", "TokensPrompt", "training.selfdistill_data"),
    Import("vllm.benchmarks.serve", "add_cli_args", "bench.serve: vLLM's serving benchmark"),
    Import("vllm.benchmarks.serve", "main", "bench.serve: vLLM's serving benchmark"),
    Import("vllm.utils.argparse_utils", "FlexibleArgumentParser", "bench.serve: vLLM's serving benchmark"),
    # ------------------------------------------------------------------ overrides
    *_runner_overrides(),
    Override(GMR, "GPUModelRunner._determine_batch_execution_and_padding",
             "EntMTPGPUModelRunner._determine_batch_execution_and_padding",
             "cuda model_runner: no FULL CUDA graph replay on steps with tree rows"),
    Override(CW, "CPUWorker.init_device", "EntMTPCPUWorker.init_device", "cpu worker: builds the EntMTP CPU runner"),
    Override(GW, "Worker.init_device", "EntMTPGPUWorker.init_device", "cuda worker: logs the GPU worker's placement"),
    Override(GW, "Worker._make_model_runner", "EntMTPGPUWorker._make_model_runner",
             "cuda worker: builds the EntMTP GPU runner"),
    Override(GW, "Worker.compile_or_warm_up_model", "EntMTPGPUWorker.compile_or_warm_up_model",
             "cuda worker: the tree kernels compiled after vLLM's warm-up, not in a served step"),
    Override(CPU_ATTN, "CPUAttentionBackendImpl.forward", "TreeCPUAttentionImpl.forward",
             "cpu attention: tree rows on CPU (and the rows-attention split)"),
    Override(CPU_ATTN, "CPUAttentionBackendImpl.do_kv_cache_update", "TreeCPUAttentionImpl.do_kv_cache_update",
             "cpu attention: K/V capture for CPU compaction"),
    Override(CPU_ATTN, "CPUAttentionBackend.get_impl_cls", "TreeCPUAttentionBackend.get_impl_cls",
             "cpu attention: CPU_ATTN builds the tree impl"),
    Override(FLASH, "FlashAttentionImpl.forward", "_TreeRows.forward", "cuda attention: tree rows on FLASH_ATTN"),
    Override(TRITON, "TritonAttentionImpl.forward", "_TreeRows.forward", "cuda attention: tree rows on TRITON_ATTN"),
    Override(FLASH, "FlashAttentionBackend.get_impl_cls", "TreeFlashAttentionBackend.get_impl_cls",
             "cuda attention: FLASH_ATTN builds the tree impl"),
    Override(TRITON, "TritonAttentionBackend.get_impl_cls", "TreeTritonAttentionBackend.get_impl_cls",
             "cuda attention: TRITON_ATTN builds the tree impl"),
    Override(ARGS, "EngineArgs.create_speculative_config", "wrap_engine_args.create_speculative_config",
             "install: `method: entmtp` / --spec-method entmtp mapped to custom_class"),
    Override(SAMPLING, "SamplingParams._validate_spec_decode", "wrap_sampling_checks._validate_spec_decode",
             "install: min_p and logit_bias let through for EntMTP engines"),
    Override(ARGS, "EngineArgs.add_cli_args", "wrap_engine_args.add_cli_args",
             "install: `entmtp` among --spec-method's choices"),
    Override(PLATFORM, "Platform.check_and_update_config", "wrap_platform.check_and_update_config",
             "install: EntMTP config checks and worker selection"),
    Override(CPU_PLATFORM, "CpuPlatform.check_and_update_config", "wrap_platform.check_and_update_config",
             "install: EntMTP config checks and worker selection on CPU"),
    Override(CUDA_PLATFORM, "CudaPlatform.check_and_update_config", "wrap_platform.check_and_update_config",
             "install: EntMTP config checks and worker selection on CUDA"),
    Override(MULTIPROC, "MultiprocExecutor.execute_model", "install.execute_model",
             "draft_handoff: a new step forgets earlier drafts"),
    Override(MULTIPROC, "MultiprocExecutor.sample_tokens", "install.sample_tokens",
             "draft_handoff: keeps the drafts carried by the output"),
    Override(MULTIPROC, "MultiprocExecutor.take_draft_token_ids", "install.take_draft_token_ids",
             "draft_handoff: answers from the kept drafts"),
    Override(LAYER_UTILS, "dispatch_cpu_unquantized_gemm", "_wrap.dispatch_cpu_unquantized_gemm",
             "cpu_gemm.vllm_gemm: packed CPU GEMM in vLLM's linear layers"),
    # ------------------------------------------------------------------ calls
    Call(LOGGER, "init_logger", "cpu / cuda worker, tree_runner, cpu_gemm.vllm_gemm: logging", 1),
    Call(OUTPUTS, "SamplerOutput", "tree_runner: verification's result", 0,
         ("sampled_token_ids", "logprobs_tensors")),
    Call(GMR, "GPUModelRunner.take_draft_token_ids", "tree_runner: drafts attached to the output", 0),
    Call(BT, "BlockTable.get_device_tensor", "cuda model_runner: GPU compaction's block table", 1),
    Call(DISPATCHER, "CudagraphDispatcher.dispatch", "cuda model_runner: FULL graphs kept off tree steps",
         None, ("valid_modes", "invalid_modes")),
    Call(COMPILATION, "CUDAGraphMode.valid_runtime_modes", "cuda model_runner: FULL graphs kept off tree steps", 0),
    Call(OPS, "cpu_attn_reshape_and_cache", "cpu attention: CPU cache layout probe", 6),
    Call(OPS, "cpu_attn_reshape_and_cache", "cpu attention: CPU compaction writes", 6,
         ("k_scale", "v_scale", "kv_cache_dtype")),
    Call(OPS, "cpu_attn_get_scheduler_metadata", "cpu rows: vLLM's op on the plain sub-batch", 0,
         ("num_reqs", "num_heads", "num_kv_heads", "head_dim", "seq_lens", "dtype", "query_start_loc", "causal",
          "sliding_window_size", "isa", "enable_kv_split", "kv_cache_dtype")),
    Call(OPS, "cpu_attention_with_kv_cache", "cpu rows: vLLM's op on the plain sub-batch", 0,
         ("query", "key_cache", "value_cache", "output", "query_start_loc", "seq_lens", "scale", "causal",
          "alibi_slopes", "sliding_window", "block_table", "softcap", "scheduler_metadata", "s_aux", "k_scale",
          "v_scale", "kv_cache_dtype")),
    Call(LAYER, "get_attention_context", "cpu attention: TreeStep of a layer in do_kv_cache_update", 1),
    Call(REGISTRY, "register_backend", "backends: register_backend(AttentionBackendEnum[name], path)", 2),
    Call(PLATFORM, "Platform.is_cpu", "install, cpu ray_device: which platform", 0),
    Call(PLATFORM, "Platform.is_cuda", "install: which platform", 0),
    Call(LAYER_UTILS, "dispatch_cpu_unquantized_gemm", "cpu_gemm.vllm_gemm: heads on vLLM's CPU GEMM", 1,
         ("remove_weight",)),
    Call(MODEL_CONFIG, "ModelConfig.get_sliding_window", "support: refuses sliding windows", 0),
    Call(MODEL_CONFIG, "ModelConfig.get_vocab_size", "proposer: the target's vocabulary", 0),
    Call(MODEL_CONFIG, "ModelConfig.get_head_size", "cuda problems: head sizes the kernels take", 0),
    Call(MODEL_CONFIG, "ModelConfig.get_total_num_kv_heads", "cuda problems: query heads per KV head", 0),
    Call(CUSTOM_PROPOSER, "create_custom_proposer", "proposer: built as vLLM's custom_class", 1),
    Call(SAMPLER, "Sampler.apply_temperature", "sampled_rows: vLLM's temperature on the rows a walk reaches", 3),
    Call(TOPK_TOPP, "TopKTopPSampler.forward_native", "sampled_rows: vLLM's top-k / top-p and draw (CUDA)", 4),
    Call(TOPK_TOPP, "TopKTopPSampler.forward_cpu", "sampled_rows: vLLM's top-k / top-p and draw (CPU)", 4),
    Call(TOPK_TOPP, "apply_top_k_top_p", "sampled_rows: vLLM's top-k / top-p for unseeded rows drawn on a CPU", 3),
    *(Call(BUILTIN_PROCS, name, "tree_runner: each builtin processor built as vLLM builds it", 3)
      for name in ("MinTokensLogitsProcessor", "LogitBiasLogitsProcessor", "MinPLogitsProcessor")),
    # ------------------------------------------------------------------ attributes
    *_attributes(GMR, "GPUModelRunner", "tree_runner / cuda model_runner: the runner's state",
                 "drafter", "uses_mrope", "input_batch", "requests", "positions", "max_model_len", "attn_groups",
                 "kv_caches", "cudagraph_dispatcher", "speculative_config", "compilation_config"),
    Attribute(COMPILATION, "CompilationConfig", "static_forward_context", "cuda warmup: the attention layers"),
    *_attributes(IB, "InputBatch", "tree_runner / cuda model_runner: the batch's rows",
                 "req_ids", "req_id_to_index", "num_reqs", "num_computed_tokens_cpu", "token_ids_cpu",
                 "num_tokens_no_spec", "block_table"),
    *_attributes(IB, "InputBatch", "tree_runner: the sampling settings vLLM's sampler reads",
                 "temperature_cpu", "top_k_cpu", "top_p_cpu", "no_top_k", "no_top_p", "generators", "logitsprocs"),
    *_attributes(GMR, "GPUModelRunner", "tree_runner: vLLM's sampler, whose steps draw the sampled tokens", "sampler"),
    Attribute(SAMPLER, "Sampler", "topk_topp_sampler", "sampled_rows: vLLM's top-k / top-p and draw"),
    *_attributes(IB, "CachedRequestState", "tree_runner / proposer: per-request sampling and lengths",
                 "sampling_params", "generator", "num_prompt_tokens"),
    Attribute(BT, "MultiGroupBlockTable", "__getitem__", "cuda model_runner: block_table[0]"),
    *_attributes(BT, "BlockTable", "cuda model_runner: compaction's cache slots", "block_size", "block_table"),
    Attribute(V1_UTILS, "CpuGpuBuffer", "np", "cuda model_runner: the block table's host copy"),
    *_attributes(SCHED, "SchedulerOutput", "tree_runner: drafts scheduled, requests gone",
                 "scheduled_spec_decode_tokens", "finished_req_ids", "preempted_req_ids", "num_scheduled_tokens"),
    *_attributes(SPEC_META, "SpecDecodeMetadata", "tree_runner: each request's logits rows",
                 "num_draft_tokens", "cu_num_sampled_tokens"),
    Attribute(KV_IFACE, "KVCacheConfig", "kv_cache_groups", "tree_runner: one KV cache group only"),
    Attribute(WU, "AttentionGroup", "backend", "cuda model_runner: the GPU tree backend check"),
    Attribute(WU, "AttentionGroup", "layer_names", "cuda warmup: the attention layers"),
    *_attributes(COMPILATION, "CUDAGraphMode", "cuda model_runner: FULL graphs kept off tree steps", "FULL", "NONE"),
    Attribute(BACKEND, "AttentionType", "DECODER", "cpu / cuda attention, cuda warmup: decoder layers only"),
    *_attributes(REGISTRY, "AttentionBackendEnum", "backends, cuda configure: the backends replaced (AttentionBackendEnum[name])",
                 "CPU_ATTN", "FLASH_ATTN", "TRITON_ATTN"),
    *_attributes(CPU_ATTN, "CPUAttentionBackendImpl", "cpu attention / rows: the impl's settings",
                 "head_size", "num_heads", "scale", "logits_soft_cap", "attn_type", "kv_cache_dtype",
                 "sliding_window", "alibi_slopes", "sinks", "is_fp8_kv_cache"),
    *_attributes(CPU_ATTN, "CPUAttentionMetadata", "cpu attention / rows: the CPU step's metadata",
                 "seq_lens", "block_table", "causal", "query_start_loc", "num_actual_tokens"),
    Attribute(CPU_ATTN, "CPUAttentionMetadataBuilder.__init__", "isa", "cpu attention / rows: layer.isa"),
    Attribute(LAYER, "Attention", "layer_name", "cpu attention: get_attention_context(layer.layer_name)"),
    *_attributes(LAYER, "Attention", "cuda warmup: each layer's impl and cache", "impl", "kv_cache"),
    *_attributes(LAYER, "set_default_quant_scales", "cpu attention / rows: layer's K/V scales",
                 "_k_scale_float", "_v_scale_float"),
    *_attributes(FLASH, "FlashAttentionImpl", "cuda attention / warmup: tree rows",
                 "attn_type", "head_size", "scale", "num_heads", "num_kv_heads", "logits_soft_cap"),
    *_attributes(TRITON, "TritonAttentionImpl", "cuda attention / warmup: tree rows",
                 "attn_type", "head_size", "scale", "num_heads", "num_kv_heads", "logits_soft_cap"),
    *_attributes(FLASH, "FlashAttentionMetadata", "cuda attention: tree rows", "seq_lens", "block_table"),
    *_attributes(TRITON, "TritonAttentionMetadata", "cuda attention: tree rows", "seq_lens", "block_table"),
    *_attributes(PLATFORM, "Platform", "install / cpu ray_device: the platform",
                 "device_type", "ray_device_key", "ray_noset_device_env_vars"),
    *_attributes(CPU_PLATFORM, "CpuPlatform", "cpu ray_device: the CPU platform's Ray device",
                 "ray_device_key", "ray_noset_device_env_vars"),
    *_attributes(GW, "Worker", "cuda worker / worker_base: the runner and its config", "model_runner", "vllm_config", "device"),
    *_attributes(ARGS, "EngineArgs", "install: `method: entmtp` and the short --spec-* flags",
                 "spec_method", "spec_model", "spec_tokens", "speculative_config", "additional_config"),
    *_attributes(ARGS, "EngineArgs", "serve_command: the `vllm serve` options entmtp serve passes or reads",
                 "dtype", "enforce_eager", "distributed_executor_backend", "kv_cache_memory_bytes",
                 "gpu_memory_utilization", "max_model_len", "kv_cache_dtype", "tensor_parallel_size",
                 "pipeline_parallel_size", "data_parallel_size", "worker_cls"),
    *_attributes(VLLM_CONFIG, "VllmConfig", "install / support / proposer: the engine's config",
                 "speculative_config", "additional_config", "model_config", "parallel_config", "cache_config",
                 "attention_config", "use_v2_model_runner"),
    *_attributes(ATTN_CONFIG, "AttentionConfig", "cuda problems / configure: the attention backend",
                 "backend", "backend_per_kind"),
    *_attributes(SPEC_CONFIG, "SpeculativeConfig", "install / proposer: the EntMTP drafter",
                 "method", "model", "num_speculative_tokens"),
    *_attributes(MODEL_CONFIG, "ModelConfig", "support / proposer: what the tree path refuses",
                 "hf_text_config", "hf_config", "uses_alibi", "use_mla", "is_hybrid", "has_inner_state",
                 "is_attention_free", "uses_mrope", "dtype"),
    Attribute(CACHE_CONFIG, "CacheConfig", "cache_dtype", "support: refuses a quantized KV cache"),
    Attribute(CACHE_CONFIG, "CacheConfig", "kv_sharing_fast_prefill", "support: refuses fast-prefill KV sharing"),
    *_attributes(PARALLEL_CONFIG, "ParallelConfig", "install / support / cpu ray_device: parallelism",
                 "worker_cls", "tensor_parallel_size", "pipeline_parallel_size", "distributed_executor_backend",
                 "world_size", "ray_runtime_env", "data_parallel_size"),
    *_attributes(SAMPLING, "SamplingParams", "step_plan / tree_runner / proposer: the tree path's sampling",
                 "temperature", "top_k", "top_p", "presence_penalty", "frequency_penalty", "repetition_penalty",
                 "min_p", "min_tokens", "logit_bias", "allowed_token_ids", "bad_words", "logprobs", "max_tokens",
                 "structured_outputs"),
    Attribute(LAYER_UTILS, "dispatch_cpu_unquantized_gemm", "cpu_linear",
              "cpu_gemm.vllm_gemm: the layer's matrix multiply it replaces"),
    # ------------------------------------------------------------------ keywords read from **kwargs
    KwargRead(GMR, "GPUModelRunner._build_attention_metadata", "for_cudagraph_capture",
              "tree_runner: no TreeStep on CUDA graph capture metadata"),
    KwargRead(GMR, "GPUModelRunner._determine_batch_execution_and_padding", "force_uniform_decode",
              "cuda model_runner: vLLM's dummy / capture runs keep every graph mode"),
    # ------------------------------------------------------------------ what vLLM calls where
    CallSite(CW, "CPUWorker.init_device", "CPUModelRunner", "cpu worker: EntMTPCPUWorker's rebinding builds our runner"),
    CallSite(GW, "Worker", "_make_model_runner", "cuda worker: EntMTPGPUWorker's runner"),
    CallSite(GMR, "GPUModelRunner._determine_batch_execution_and_padding", "cudagraph_dispatcher.dispatch",
             "cuda model_runner: the patched dispatch sees valid_modes / invalid_modes as keywords",
             ("valid_modes", "invalid_modes"), f"{DISPATCHER}:CudagraphDispatcher.dispatch"),
    CallSite(GMR, "GPUModelRunner.sample_tokens", "propose_draft_token_ids",
             "tree_runner: drafting runs inside sample_tokens (timed, attached to its output)"),
    CallSite(GMR, "GPUModelRunner.sample_tokens", "_sample", "tree_runner: verification inside sample_tokens"),
    CallSite(GMR, "GPUModelRunner.execute_model", "_prepare_inputs", "tree_runner: the step plan"),
    CallSite(GMR, "GPUModelRunner.execute_model", "_build_attention_metadata", "tree_runner: TreeStep attached"),
    CallSite(GMR, "GPUModelRunner.execute_model", "_determine_batch_execution_and_padding",
             "cuda model_runner: FULL graphs kept off tree steps"),
    CallSite(GMR, "GPUModelRunner.__init__", "create_custom_proposer", "proposer: built as custom_class"),
    CallSite(GMR, "GPUModelRunner", "drafter.load_model", "proposer: load_model(target) on GPU"),
    CallSite(CMR, "CPUModelRunner.load_model", "drafter.load_model", "proposer: load_model(target) on CPU"),
    CallSite(CUSTOM_PROPOSER, "create_custom_proposer", "user_class", "proposer: EntMTPProposer(vllm_config)"),
    CallSite(CORE, "EngineCore", "model_executor.take_draft_token_ids",
             "draft_handoff: the engine core asks the executor for the drafts"),
    # ------------------------------------------------------------------ strings
    Constant(PLUGINS, "vllm.general_plugins", "__init__.register: the plugin's entry-point group"),
    Constant(SPEC_CONFIG, "custom_class", "install / proposer: EntMTP is vLLM's custom_class drafter"),
    Constant(ENVS, "VLLM_ENABLE_V1_MULTIPROCESSING", "serve_command, metrics: in-process engine core"),
    Constant(ENVS, "VLLM_CPU_KVCACHE_SPACE", "serve_command: the legacy CPU KV cache size"),
    Constant(ENVS, "VLLM_CPU_OMP_THREADS_BIND", "serve_command: vLLM's own thread binding"),
    Constant(ENVS, "VLLM_PLUGINS", "proposer: the hint when the plugin is not loaded"),
    Constant(ENVS, "VLLM_LOGGING_LEVEL", "cpu / cuda worker: vLLM's logger configuration"),
    Constant(ENVS, "VLLM_USE_V2_MODEL_RUNNER", "support: the fix it names for the V2 runner"),
    Constant(ARGS, "--spec-method", "install: the parser option whose choices get `entmtp`", "EngineArgs.add_cli_args"),
    Constant(ARGS, "--spec-model", "install: a short flag SPEC_FLAGS folds into the speculative config",
             "EngineArgs.add_cli_args"),
    Constant(ARGS, "--spec-tokens", "install: a short flag SPEC_FLAGS folds into the speculative config",
             "EngineArgs.add_cli_args"),
    Constant(SPEC_CONFIG, "custom_class", "install: `method: entmtp` becomes this method", "SpeculativeMethod"),
    Constant(VLLM_CONFIG, "custom_class",
             "cuda worker: custom_class keeps vLLM on the V1 model runner the EntMTP runners subclass",
             "VllmConfig._get_v2_model_runner_unsupported_features"),
    # ------------------------------------------------------------------ values and results relied on
    Value(CPU_ATTN, "CPUAttentionBackend", "forward_includes_kv_cache_update", False,
          "cpu attention: K/V written (and captured) in do_kv_cache_update, before attention"),
    Value(FLASH, "FlashAttentionBackend", "forward_includes_kv_cache_update", False,
          "cuda attention: every tree node's K/V is in the cache when the tree rows are recomputed"),
    Value(TRITON, "TritonAttentionBackend", "forward_includes_kv_cache_update", False,
          "cuda attention: every tree node's K/V is in the cache when the tree rows are recomputed"),
    Value(PARALLEL_CONFIG, "ParallelConfig", "worker_cls", "auto",
          "install: --worker-cls left out (auto) gets the platform's EntMTP worker"),
    Value(ATTN_CONFIG, "AttentionConfig", "backend", None,
          "cuda configure: --attention-backend left out (None) gets FLASH_ATTN"),
    CallSite(LAYER, "unified_kv_cache_update", "do_kv_cache_update",
             "cpu attention: the CPU impl's do_kv_cache_update (K/V capture) is what writes the cache"),
    Returns(LAYER, "get_attention_context", 4, "cpu attention: get_attention_context(...)[0] is the metadata",
            "attn_metadata"),
    Returns(GMR, "GPUModelRunner._build_attention_metadata", 2,
            "tree_runner: unpacks (attn_metadata, spec_metadata) to attach the TreeStep"),
    Expression(FLASH, "FlashAttentionImpl.forward", "kv_cache.transpose(1, 2).split(self.head_size, dim=-1)",
               "cuda kernels: split_kv takes the same [blocks, block_size, Hkv, D] K and V views"),
    Expression(TRITON, "TritonAttentionImpl.forward", "kv_cache.transpose(1, 2)",
               "cuda kernels: split_kv takes the same [blocks, block_size, Hkv, D] K and V views"),
    Expression(TRITON, "TritonAttentionImpl.do_kv_cache_update",
               "kv_cache.transpose(1, 2).split(self.head_size, dim=-1)",
               "cuda kernels: split_kv takes the same [blocks, block_size, Hkv, D] K and V views"),
    Expression(KV_IFACE, "compute_layer_kv_cache_shape_bytes",
               "(num_blocks * blocks_per_page, spec.num_heads, spec.get_num_kernel_states(bs), "
               "spec.state_content_size_bytes)",
               "cuda model_runner / kernels: each layer's cache is (blocks, Hkv, block_size, 2 * D)"),
    Expression(CPU_ATTN, "CPUAttentionBackendImpl.do_kv_cache_update",
               "kv_cache.view((num_blocks, num_kv_heads, block_size * 2, -1))",
               "cpu attention: compaction and the layout probe view the cache as vLLM's op does"),
    Expression(CPU_ATTN, "CPUAttentionBackendImpl.do_kv_cache_update", "kv_cache.chunk(2, dim=2)",
               "cpu attention: compaction and the layout probe view the cache as vLLM's op does"),
    Expression(SAMPLING, "SamplingParams._validate_spec_decode", "self.min_p > _SAMPLING_EPS or self.logit_bias",
               "install: the refusal of min_p and logit_bias lifted for EntMTP engines (the two fields hidden)"),
    Expression(LOGITSPROCS, "build_logitsprocs",
               "LogitsProcessors([MinTokensLogitsProcessor(vllm_config, device, is_pin_memory)])",
               "tree_runner: with speculation vLLM builds min_tokens only; EntMTP engines get every builtin"),
    Expression(BUILTIN_PROCS, "MinPLogitsProcessor.apply",
               "torch.amax(probability_values, dim=-1, keepdim=True)", "sampled_rows.apply_min_p mirrors it"),
    Expression(BUILTIN_PROCS, "MinPLogitsProcessor.apply", "max_probabilities.mul_(self.min_p)",
               "sampled_rows.apply_min_p mirrors it"),
    Expression(BUILTIN_PROCS, "MinPLogitsProcessor.apply", "logits.masked_fill_(invalid_token_mask, -float('inf'))",
               "sampled_rows.apply_min_p mirrors it"),
    Expression(BUILTIN_PROCS, "LogitBiasLogitsProcessor.apply", "logits[self.logits_slice]",
               "sampled_rows.apply_logit_bias mirrors it"),
    Expression(SAMPLER, "Sampler.forward", "logits.to(torch.float32)",
               "tree_runner / sampled_rows: bias, temperature and draws on float32 rows, as vLLM's sampler"),
    Expression(SAMPLER, "Sampler.sample",
               "self.apply_temperature(logits, sampling_metadata.temperature, sampling_metadata.all_random)",
               "sampled_rows: the temperature first"),
    Expression(SAMPLER, "Sampler.sample",
               "self.topk_topp_sampler(logits, sampling_metadata.generators, sampling_metadata.top_k, "
               "sampling_metadata.top_p)",
               "sampled_rows: then top-k / top-p and the draw, with the seeded requests' generators"),
    # ------------------------------------------------------------------ objects we set attributes on
    Settable(CPU_ATTN, "CPUAttentionMetadata", "tree_step / cpu rows: TreeStep and the rows plan on the metadata"),
    Settable(FLASH, "FlashAttentionMetadata", "tree_step: TreeStep on the metadata"),
    Settable(TRITON, "TritonAttentionMetadata", "tree_step: TreeStep on the metadata"),
    Settable(OUTPUTS, "ModelRunnerOutput", "draft_handoff: drafts carried on the output"),
    Settable(DISPATCHER, "CudagraphDispatcher", "cuda model_runner: dispatch patched on the instance for one step"),
    Settable(MULTIPROC, "MultiprocExecutor", "draft_handoff: the kept drafts"),
)
"""Everything of vLLM the plugin relies on (the package docstring says what each kind checks)."""


def manifest_sizes(entries=MANIFEST) -> dict[str, int]:
    """How many entries of each kind."""
    sizes: dict[str, int] = {}
    for entry in entries:
        sizes[entry.kind] = sizes.get(entry.kind, 0) + 1
    return sizes
