"""What the general plugin changes in vLLM, in every process, before any engine is built.

Everything here runs when `register()` is called (vLLM loads its general plugins in every
process); importing this module changes nothing. Only the running platform's package is
imported (`platforms.py`: `cpu/` on vLLM's CPU platform, `cuda/` on CUDA), so a CUDA
process never imports vLLM's CPU worker, which replaces torch's CUDA APIs process-wide.

1. Attention backends (`register_backend`, vLLM 0.32 `v1/attention/backends/registry.py`): the
   platform package registers its tree backends under vLLM's names (`CPU_ATTN` on CPU;
   `FLASH_ATTN` and `TRITON_ATTN` on CUDA). Without a `TreeStep` on a step's metadata each
   behaves exactly like the stock backend, so engines without EntMTP are unaffected.
2. The forms users type map onto vLLM's `custom_class` route (`"model": "entmtp_vllm.EntMTP"`)
   before vLLM validates the method (a closed `Literal`): `--speculative-config '{"method":
   "entmtp"}'`, `--speculative-config '{"model": "entmtp"}'`, `--spec-method entmtp` and
   `--spec-model entmtp` (`EngineArgs.create_speculative_config` is wrapped; `--spec-method`'s
   choices in vLLM's argument parser get `entmtp`). A missing `num_speculative_tokens` becomes
   the largest tree's drafts.
3. The current platform's `check_and_update_config` (run while `VllmConfig` is built, in the
   process that parses the arguments) is wrapped: when the speculative model is EntMTP it
   validates `additional_config["entmtp"]`, refuses what the tree path cannot serve
   (`support.py`, the platform package's `problems`), applies the platform's settings
   (`configure`) and, if `--worker-cls` was left at auto, selects the platform's EntMTP worker.
   Any `EntMTPError` there makes vLLM refuse to start, before any model is loaded.
4. vLLM's multiprocess executor answers `take_draft_token_ids` from the drafts EntMTP's runner
   attached to the step's output, instead of a round trip to the worker (`draft_handoff.py`).
5. vLLM's refusal of min_p and logit_bias under speculative decoding is lifted for EntMTP
   engines only (`wrap_sampling_checks`): the tree path applies both.
6. Platform extras (`cpu/__init__.py`): on CPU, vLLM's Ray executor gets a Ray device, and
   vLLM's CPU linear dispatch the packed matrix multiply hook (`ENTMTP_CPU_GEMM=packed`).
"""

from __future__ import annotations

from typing import Any

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.vllm_plugin.config import METHOD, PROPOSER_CLASS, config_from_vllm, heads_folder, parse_config, resolve
from entmtp_vllm.vllm_plugin.platforms import platform_package
from entmtp_vllm.vllm_plugin.support import check_supported
PROPOSER_NAMES = (PROPOSER_CLASS, "entmtp_vllm.vllm_plugin.proposer.EntMTPProposer")
SPEC_FLAGS = (("--spec-method", "spec_method", "method"), ("--spec-model", "spec_model", "model"),
              ("--spec-tokens", "spec_tokens", "num_speculative_tokens"))
"""vLLM's short speculative flags: (flag, `EngineArgs` field, `--speculative-config` key)."""

_MARK = "_entmtp_wrapped"


def drafts_with_entmtp(speculative_config: Any) -> bool:
    """Whether a vLLM `SpeculativeConfig` is EntMTP's."""
    spec = speculative_config
    return spec is not None and spec.method == "custom_class" and spec.model in PROPOSER_NAMES


def entmtp_requested(vllm_config: Any) -> bool:
    """Whether this engine drafts with EntMTP."""
    return drafts_with_entmtp(getattr(vllm_config, "speculative_config", None))


def platform_name(platform: Any) -> str:
    """`cpu`, `cuda`, or the platform's own device type."""
    if platform.is_cpu():
        return "cpu"
    if platform.is_cuda():
        return "cuda"
    return str(getattr(platform, "device_type", None) or type(platform).__name__)


def prepare_config(vllm_config: Any, platform: str = "cpu") -> None:
    """Validate the EntMTP settings, refuse what cannot be served, apply the platform's settings
    and pick its worker (no-op for other engines)."""
    if not entmtp_requested(vllm_config):
        return
    settings = config_from_vllm(vllm_config)
    resolve(settings, vllm_config.speculative_config.num_speculative_tokens)
    heads_folder(settings)
    check_supported(vllm_config, platform)
    package = platform_package(platform)
    configure = getattr(package, "configure", None)
    if configure is not None:
        configure(vllm_config)
    parallel = vllm_config.parallel_config
    if parallel.worker_cls == "auto" or parallel.worker_cls in package.STOCK_WORKERS:
        parallel.worker_cls = package.WORKER


def _names_entmtp(speculative: Any) -> bool:
    return isinstance(speculative, dict) and METHOD in (speculative.get("method"), speculative.get("model"))


def map_method(speculative: dict[str, Any] | None, additional: Any) -> dict[str, Any] | None:
    """`{"method": "entmtp", ...}` (or `{"model": "entmtp", ...}`) as vLLM's `custom_class` form;
    other configs unchanged."""
    if not _names_entmtp(speculative):
        return speculative
    mapped = {key.replace("-", "_"): value for key, value in speculative.items() if key != "method"}
    model = mapped.get("model")
    if model is not None and model != METHOD and model not in PROPOSER_NAMES:
        raise EntMTPError(
            f"--speculative-config: with \"method\": \"entmtp\" leave \"model\" out (got {model!r}); EntMTP's heads "
            "and trees go in --additional-config '{\"entmtp\": {\"heads\": ..., \"bank\": ...}}'"
        )
    method = speculative.get("method")
    if method is not None and method != METHOD:
        raise EntMTPError(f"--speculative-config: \"model\": \"entmtp\" is EntMTP, but \"method\" is {method!r}: "
                          "leave \"method\" out or write \"entmtp\"")
    mapped["model"] = PROPOSER_CLASS
    if mapped.get("num_speculative_tokens") is None:
        raw = additional.get("entmtp") if isinstance(additional, dict) else None
        mapped["num_speculative_tokens"] = resolve(parse_config(raw)).bank.max_nodes - 1
    return mapped


def fold_spec_flags(engine_args: Any) -> None:
    """When EntMTP is asked for, by a short flag or in `--speculative-config`: the short flags
    (`--spec-method entmtp`, `--spec-model entmtp`, `--spec-tokens N`) moved into the speculative
    config (vLLM would otherwise add `--spec-tokens` after the mapping filled in the default)."""
    flags = {key: getattr(engine_args, field) for _, field, key in SPEC_FLAGS}
    if METHOD not in (flags["method"], flags["model"]) and not _names_entmtp(engine_args.speculative_config):
        return
    merged = dict(engine_args.speculative_config or {})
    for flag, field, key in SPEC_FLAGS:
        value = flags[key]
        if value is None:
            continue
        if key in merged or key.replace("_", "-") in merged:
            raise EntMTPError(f"{flag} and --speculative-config['{key}'] are mutually exclusive")
        merged[key] = value
        setattr(engine_args, field, None)
    engine_args.speculative_config = merged


def wrap_engine_args() -> None:
    """Map EntMTP's forms before vLLM builds its `SpeculativeConfig`, and accept `entmtp` among
    `--spec-method`'s choices in vLLM's parser (once per process)."""
    from vllm.engine.arg_utils import EngineArgs

    stock = EngineArgs.create_speculative_config
    if not getattr(stock, _MARK, False):

        def create_speculative_config(self, *args, **kwargs):
            fold_spec_flags(self)
            self.speculative_config = map_method(self.speculative_config, self.additional_config)
            return stock(self, *args, **kwargs)

        setattr(create_speculative_config, _MARK, True)
        EngineArgs.create_speculative_config = create_speculative_config

    stock_cli = EngineArgs.add_cli_args
    if not getattr(stock_cli, _MARK, False):

        def add_cli_args(parser, *args, **kwargs):
            parser = stock_cli(parser, *args, **kwargs)
            accept_method_choice(parser)
            return parser

        setattr(add_cli_args, _MARK, True)
        EngineArgs.add_cli_args = staticmethod(add_cli_args)


def accept_method_choice(parser: Any) -> None:
    """`entmtp` among the choices of `parser`'s `--spec-method` (vLLM derives them from its
    method `Literal`); a copy of the list, so vLLM's own stays as it is."""
    for action in getattr(parser, "_actions", ()):
        if "--spec-method" in action.option_strings and action.choices is not None and METHOD not in action.choices:
            action.choices = [*action.choices, METHOD]


def wrap_sampling_checks() -> None:
    """Let min_p and logit_bias through vLLM's request validation for EntMTP engines (once per
    process). vLLM refuses both for every speculative method (`SamplingParams._validate_spec_decode`,
    run where requests enter: the API server, `LLM`); EntMTP's verification applies them as vLLM's
    sampler does. Only those two fields are hidden from the check, only for an EntMTP config:
    whatever else vLLM checks there still runs."""
    from vllm.sampling_params import SamplingParams

    stock = SamplingParams._validate_spec_decode
    if getattr(stock, _MARK, False):
        return

    def _validate_spec_decode(self, speculative_config, *args, **kwargs):
        if not drafts_with_entmtp(speculative_config):
            return stock(self, speculative_config, *args, **kwargs)
        min_p, logit_bias = self.min_p, self.logit_bias
        self.min_p, self.logit_bias = 0.0, None
        try:
            return stock(self, speculative_config, *args, **kwargs)
        finally:
            self.min_p, self.logit_bias = min_p, logit_bias

    setattr(_validate_spec_decode, _MARK, True)
    SamplingParams._validate_spec_decode = _validate_spec_decode


def wrap_platform() -> None:
    """Install the current platform's package and run `prepare_config` after the platform's own
    config checks (once per process)."""
    from vllm.platforms import current_platform

    platform_cls = current_platform if isinstance(current_platform, type) else type(current_platform)
    stock = platform_cls.check_and_update_config
    if getattr(stock, _MARK, False):
        return
    name = platform_name(current_platform)
    package = platform_package(name)
    if package is not None:
        package.install(platform_cls)
    prepare = getattr(package, "prepare", None)

    def check_and_update_config(cls, vllm_config) -> None:
        stock(vllm_config)
        if prepare is not None:
            prepare(vllm_config)
        prepare_config(vllm_config, name)

    setattr(check_and_update_config, _MARK, True)
    platform_cls.check_and_update_config = classmethod(check_and_update_config)
