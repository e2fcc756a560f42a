"""Helpers of the Ray deployment tests (a module name no other test folder uses)."""

from __future__ import annotations

from pathlib import Path

import yaml

CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "ray" / "serve_config.yaml"
MAX_TOKENS = 24


def app_args() -> dict:
    """The `args` of the shipped Serve config's one application."""
    (app,) = yaml.safe_load(CONFIG.read_text())["applications"]
    return app["args"]


def client(base_url: str):
    from openai import OpenAI

    return OpenAI(base_url=base_url, api_key="EMPTY", max_retries=0, timeout=300.0)


def chat(openai_client, model: str, prompt: str, max_tokens: int = MAX_TOKENS) -> str:
    reply = openai_client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens, temperature=0.0
    )
    return reply.choices[0].message.content
