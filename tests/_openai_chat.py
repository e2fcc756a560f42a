"""An OpenAI client for the tests' local servers (vLLM, Ray Serve), and one greedy chat turn."""

from __future__ import annotations


def client(base_url: str):
    from openai import OpenAI

    return OpenAI(base_url=base_url, api_key="EMPTY", max_retries=0, timeout=300.0)


def chat(openai_client, model: str, prompt: str, max_tokens: int) -> str:
    reply = openai_client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens, temperature=0.0
    )
    return reply.choices[0].message.content
