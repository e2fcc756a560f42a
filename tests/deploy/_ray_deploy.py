"""Helpers of the Ray deployment tests (a module name no other test folder uses)."""

from __future__ import annotations

from pathlib import Path

import yaml

import _openai_chat
from _openai_chat import client  # noqa: F401 (the deploy tests' client)

CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "ray" / "serve_config.yaml"
MAX_TOKENS = 24


def app_args() -> dict:
    """The `args` of the shipped Serve config's one application."""
    (app,) = yaml.safe_load(CONFIG.read_text())["applications"]
    return app["args"]


def chat(openai_client, model: str, prompt: str, max_tokens: int = MAX_TOKENS) -> str:
    return _openai_chat.chat(openai_client, model, prompt, max_tokens)
