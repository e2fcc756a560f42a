"""The step's drafts carried back with its output (`draft_handoff.py`): vLLM's real
`MultiprocExecutor` methods, wrapped as the plugin wraps them, over a recorder in place of the
message queues to the worker process (the served path runs in `test_serve_e2e.py`)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.vllm

pytest.importorskip("vllm")

from vllm.v1.executor.multiproc_executor import MultiprocExecutor  # noqa: E402
from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT, DraftTokenIds, ModelRunnerOutput  # noqa: E402

from entmtp_vllm.vllm_plugin import draft_handoff  # noqa: E402


class Worker:
    """Answers the executor's calls as the worker would, and records them."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.output: object = None
        self.drafts = DraftTokenIds(["r0"], [[1, 2]])

    def __call__(self, method, *args, **kwargs):
        self.calls.append(method)
        return {"execute_model": None, "sample_tokens": self.output, "take_draft_token_ids": self.drafts}[method]


@pytest.fixture
def executor():
    draft_handoff.install()
    draft_handoff.install()  # once per process: a second call changes nothing
    executor = object.__new__(MultiprocExecutor)  # no worker processes: the recorder answers
    executor.collective_rpc = Worker()
    executor.output_rank = 0
    executor.kv_output_aggregator = executor.ec_output_aggregator = None
    return executor


def step(executor, output):
    worker = executor.collective_rpc
    worker.output = output
    executor.execute_model(None, non_block=False)
    got = executor.sample_tokens(None)
    return got, executor.take_draft_token_ids()


def test_carried_drafts_need_no_round_trip(executor):
    carried = DraftTokenIds(["a", "b"], [[5], [6, 7]])
    output = draft_handoff.attach(ModelRunnerOutput(req_ids=["a", "b"], req_id_to_index={"a": 0, "b": 1}), carried)
    got, drafts = step(executor, output)
    assert got is output and drafts is carried
    assert executor.collective_rpc.calls == ["execute_model", "sample_tokens"]
    # carried "no drafts" (None) is an answer too
    _, drafts = step(executor, draft_handoff.attach(EMPTY_MODEL_RUNNER_OUTPUT, None))
    assert drafts is None and "take_draft_token_ids" not in executor.collective_rpc.calls


def test_outputs_without_drafts_keep_the_round_trip(executor):
    worker = executor.collective_rpc
    _, drafts = step(executor, ModelRunnerOutput(req_ids=[], req_id_to_index={}))  # another proposer's output
    assert drafts is worker.drafts and worker.calls[-1] == "take_draft_token_ids"
    # a stashed answer never outlives its step: the next step's execute_model drops it
    step(executor, draft_handoff.attach(EMPTY_MODEL_RUNNER_OUTPUT, DraftTokenIds(["x"], [[9]])))
    executor.execute_model(None)
    assert executor.take_draft_token_ids() is worker.drafts
    # non-blocking sampling returns a future: nothing is stashed
    executor.execute_model(None)
    worker.output = draft_handoff.attach(EMPTY_MODEL_RUNNER_OUTPUT, DraftTokenIds(["y"], [[3]]))
    executor.sample_tokens(None, non_block=True)
    assert executor.take_draft_token_ids() is worker.drafts


def test_attach_leaves_the_shared_empty_output_alone():
    carried = draft_handoff.attach(EMPTY_MODEL_RUNNER_OUTPUT, DraftTokenIds([], []))
    assert carried is not EMPTY_MODEL_RUNNER_OUTPUT
    assert not hasattr(EMPTY_MODEL_RUNNER_OUTPUT, draft_handoff.ATTR)
    assert getattr(carried, draft_handoff.ATTR).req_ids == []
