"""`entmtp serve --no-in-process`: vLLM's own three-process layout on CPU (API server, engine core,
worker) with EntMTP, end to end with the OpenAI client.

The front door's default runs the worker inside the engine core (`test_serve_e2e.py`); this is
the layout a user gets with `--no-in-process`, where the engine core schedules from drafts the
worker hands back on its step outputs (`draft_handoff.py`). Checks: the worker is a process of
its own, greedy chat is the same streamed and not streamed and for two concurrent clients, and
the drafts really went through the handoff (`entmtp_draft_handoffs` > 0) and were verified.
"""

from __future__ import annotations

import pytest

import _openai_chat
from _entmtp_server import entmtp_server

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

MAX_TOKENS = 32
PROMPTS = ["Write a haiku about the sea.", "List three prime numbers and say why they are prime."]


@pytest.fixture(scope="module")
def server(tmp_path_factory, model_path):
    """(base_url, model name, log path) of one `entmtp serve --no-in-process`."""
    with entmtp_server(tmp_path_factory.mktemp("serve_mp"), model_path, ["--no-in-process"]) as (base_url, log):
        yield base_url, model_path, log


def _chat(base_url: str, model: str, prompt: str) -> str:
    return _openai_chat.chat(_openai_chat.client(base_url), model, prompt, MAX_TOKENS)


def test_the_worker_is_a_process_of_its_own(server):
    _, _, log = server
    text = log.read_text(errors="replace")
    assert "(Worker pid=" in text and "(EngineCore" in text
    assert "VLLM_ENABLE_V1_MULTIPROCESSING=0" not in text  # the front door left vLLM's layout alone


def test_greedy_chat_streamed_concurrent_and_handed_off(server):
    import httpx

    from entmtp_vllm.bench.serve import metrics_url, parse_prometheus

    base_url, model, _ = server
    sequential = [_chat(base_url, model, prompt) for prompt in PROMPTS]
    assert all(text.strip() for text in sequential)

    pieces = []
    stream = _openai_chat.client(base_url).chat.completions.create(
        model=model, messages=[{"role": "user", "content": PROMPTS[0]}], max_tokens=MAX_TOKENS,
        temperature=0.0, stream=True,
    )
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
    assert "".join(pieces) == sequential[0]

    assert _openai_chat.concurrent_chats(base_url, model, PROMPTS, MAX_TOKENS) == sequential

    response = httpx.get(metrics_url(base_url), timeout=30.0)
    response.raise_for_status()
    snapshot = parse_prometheus(response.text)
    assert snapshot.total("entmtp_draft_handoffs") > 0  # the worker handed its drafts back
    assert snapshot.total("entmtp_tree_steps") > 0
    assert snapshot.total("vllm:spec_decode_num_accepted_tokens") > 0
