"""A step's drafts travel back with its output: one round trip to the worker fewer per step.

Without async scheduling (vLLM's CPU platform turns it off for every engine), vLLM's engine core
asks the worker for the next step's drafts after every step (`EngineCore.post_step`, vLLM 0.32.0
`v1/engine/core.py:689`): with the multiprocess executor that is a third message round trip
(`take_draft_token_ids`, `v1/executor/multiproc_executor.py:374`) after `execute_model` and
`sample_tokens`, which a server without speculation never makes. On a 2-core CPU, where the
engine core and the worker each busy-poll a core, that round trip is part of every speculative
step's cost.

The drafts are known when `sample_tokens` returns (the runner drafts inside it), and nothing
runs on the worker between that and the engine core's request for them. So EntMTP's runner
attaches them to the step's output (`attach`: the same `take_draft_token_ids()` the request
would have called, at the same point), and the executor, wrapped in the engine-core process
(`install`), answers `take_draft_token_ids` from the last `sample_tokens` output when it carries
them; otherwise (another proposer, an output that came from `execute_model`, a step without
sampling) it makes the round trip as before. Only the multiprocess executor is wrapped: the
in-process (uni) executor calls the worker directly, and Ray's keeps its own path.
"""

from __future__ import annotations

import copy
from typing import Any

from entmtp_vllm.vllm_plugin import metrics

ATTR = "entmtp_draft_token_ids"
"""The attribute of a `ModelRunnerOutput` that carries the step's `DraftTokenIds` (or None)."""

_MISSING = object()
_STASH = "_entmtp_draft_stash"
_MARK = "_entmtp_handoff"


def attach(output: Any, drafts: Any) -> Any:
    """`output` (a `ModelRunnerOutput`) carrying `drafts`; a copy, so that a shared constant
    output (vLLM's `EMPTY_MODEL_RUNNER_OUTPUT`) is never changed."""
    carried = copy.copy(output)
    setattr(carried, ATTR, drafts)
    return carried


def install() -> None:
    """Wrap the multiprocess executor's `execute_model`, `sample_tokens` and
    `take_draft_token_ids` (once per process)."""
    from vllm.v1.executor.multiproc_executor import MultiprocExecutor

    if getattr(MultiprocExecutor.take_draft_token_ids, _MARK, False):
        return
    stock_execute, stock_sample, stock_take = (
        MultiprocExecutor.execute_model, MultiprocExecutor.sample_tokens, MultiprocExecutor.take_draft_token_ids)

    def execute_model(self, *args, **kwargs):
        self.__dict__.pop(_STASH, None)  # a new step: no drafts from an earlier one
        return stock_execute(self, *args, **kwargs)

    def sample_tokens(self, grammar_output, non_block: bool = False):
        output = stock_sample(self, grammar_output, non_block)
        drafts = _MISSING if non_block else getattr(output, ATTR, _MISSING)
        if drafts is _MISSING:
            self.__dict__.pop(_STASH, None)
        else:
            self.__dict__[_STASH] = drafts
        return output

    def take_draft_token_ids(self):
        drafts = self.__dict__.pop(_STASH, _MISSING)
        if drafts is _MISSING:
            return stock_take(self)
        metrics.count("draft_handoffs")
        return drafts

    for wrapper in (execute_model, sample_tokens, take_draft_token_ids):
        setattr(wrapper, _MARK, True)
    MultiprocExecutor.execute_model = execute_model
    MultiprocExecutor.sample_tokens = sample_tokens
    MultiprocExecutor.take_draft_token_ids = take_draft_token_ids
