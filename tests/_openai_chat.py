"""An OpenAI client for the tests' local servers (vLLM, Ray Serve), one greedy chat turn, and
greedy chat turns sent at the same moment from several clients."""

from __future__ import annotations

import threading


def client(base_url: str):
    from openai import OpenAI

    return OpenAI(base_url=base_url, api_key="EMPTY", max_retries=0, timeout=300.0)


def chat(openai_client, model: str, prompt: str, max_tokens: int) -> str:
    reply = openai_client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens, temperature=0.0
    )
    return reply.choices[0].message.content


def concurrent_chats(base_url: str, model: str, prompts: list[str], max_tokens: int) -> list[str]:
    """One greedy chat turn per prompt, each from its own client thread, all released together;
    the replies in prompt order (raises the first error a thread met)."""
    results: dict[int, str] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(prompts))

    def worker(i: int) -> None:
        try:
            own = client(base_url)
            barrier.wait(timeout=60)
            results[i] = chat(own, model, prompts[i], max_tokens)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(prompts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    if errors:
        raise errors[0]
    return [results[i] for i in range(len(prompts))]
