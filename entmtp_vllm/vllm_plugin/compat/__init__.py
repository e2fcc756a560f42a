"""Does the plugin still fit a vLLM source tree? A check by `ast`: nothing of vLLM is imported,
no GPU is needed, so any release can be checked before it is installed.

`MANIFEST` lists every piece of vLLM the plugin (`entmtp_vllm/vllm_plugin/`,
`entmtp_vllm/cpu_gemm/vllm_gemm.py`, and what `entmtp serve` passes to `vllm serve`) overrides,
calls, reads or relies on, each with the part of the plugin that breaks without it (`used_by`):

- `Import`: a name the plugin imports from a vLLM module: the module exists and defines or
  re-imports it (a submodule, or a name its lazy `__getattr__` serves, counts);
- `Override`: a vLLM method (or function) the plugin replaces: it exists in the vLLM class or
  one of its vLLM base classes, and our definition's parameters match it: the same names in the
  same order, or, where ours forwards `*args` / `**kwargs`, the names ours lists are the first of
  vLLM's. Our definition is read from our own source, found by its qualified name anywhere under
  `entmtp_vllm/` (files move; names stay);
- `Call`: a vLLM function, method or class the plugin calls: it exists, takes that many positional
  arguments and those keywords, and needs nothing the plugin does not pass;
- `Attribute`: an attribute the plugin reads or writes on a vLLM object: the class or a vLLM base
  defines it (`self.x = ...` in any method, a class-level assignment or annotation: dataclass,
  pydantic and msgspec fields, enum members; a method or property); for a function owner, the
  function stores it on an object it is given (`layer.isa = ...`);
- `KwargRead`: a keyword our override reads from the `**kwargs` vLLM passes it
  (`kwargs.get("for_cudagraph_capture")`): vLLM's method has that parameter, AND some call of it
  in vLLM passes it by keyword, AND no call passes it by position (a value passed by position
  lands in our `*args`, and our `kwargs.get` silently reads None). The parameter alone is not
  enough: what our override sees is what vLLM's callers pass, so both are read;
- `CallSite`: vLLM code the plugin counts on calling something (`CPUWorker.init_device` builds
  `CPUModelRunner` by the name we rebind; the engine core asks the executor for
  `take_draft_token_ids`); with keywords, each is passed by keyword in some call and by position
  in none;
- `Constant`: a string vLLM must still use (an environment variable, the plugin entry-point
  group, the `custom_class` speculative method), anywhere in a module or inside one definition;
- `Value`: a class attribute vLLM sets to a literal the plugin relies on
  (`forward_includes_kv_cache_update = False`: the backends write K/V before attention);
- `Returns`: a function whose tuple result the plugin unpacks or indexes;
- `Expression`: a line of vLLM the plugin mirrors (how a backend views its KV cache), found as
  the same expression inside the same method;
- `Settable`: a vLLM class whose instances take the plugin's own attributes (no `__slots__`,
  not a frozen or slotted dataclass, not a msgspec Struct / NamedTuple).

`check(source_root)` returns a `Finding` per difference; `python -m entmtp_vllm.vllm_plugin.compat`
runs it on the installed vLLM (found without importing it) or on `--vllm-source DIR`.

- `entries.py`       the entry kinds above, `Finding` and `CompatError`
- `manifest.py`      `MANIFEST` and the names of the vLLM modules it names
- `syntax.py`        what a def or a body says, read with `ast` (parameters, stores, returns, calls)
- `vllm_source.py`   `Source`: a vLLM source tree, its names resolved; `installed_source()`
- `our_source.py`    `OurSource`: our own definitions, by qualified name
- `check.py`         one check per entry kind: `check`, `check_entries`
- `command_line.py`  `main`, the command line (`__main__.py` runs it)

Stdlib only, by design: no vLLM, torch or other EntMTP import.
"""

from __future__ import annotations

from entmtp_vllm.vllm_plugin.compat.check import check, check_entries
from entmtp_vllm.vllm_plugin.compat.command_line import main
from entmtp_vllm.vllm_plugin.compat.entries import (
    Attribute,
    Call,
    CallSite,
    CompatError,
    Constant,
    Entry,
    Expression,
    Finding,
    Import,
    KwargRead,
    Override,
    Returns,
    Settable,
    Value,
)
from entmtp_vllm.vllm_plugin.compat.manifest import (
    ARGS,
    ATTN_CONFIG,
    BACKEND,
    BT,
    CACHE_CONFIG,
    CMR,
    COMPILATION,
    CORE,
    CPU_ATTN,
    CPU_PLATFORM,
    CUDA_PLATFORM,
    CUSTOM_PROPOSER,
    CW,
    DISPATCHER,
    ENVS,
    FLASH,
    GMR,
    GW,
    IB,
    KV_IFACE,
    LAYER,
    LAYER_UTILS,
    LOGGER,
    MANIFEST,
    MODEL_CONFIG,
    MULTIPROC,
    OPS,
    OUTPUTS,
    PARALLEL_CONFIG,
    PLATFORM,
    PLUGINS,
    REGISTRY,
    SAMPLING,
    SCHED,
    SPEC_CONFIG,
    SPEC_META,
    TRITON,
    V1_UTILS,
    VLLM_CONFIG,
    WU,
    manifest_sizes,
)
from entmtp_vllm.vllm_plugin.compat.our_source import OurSource, package_root
from entmtp_vllm.vllm_plugin.compat.vllm_source import Source, installed_source
