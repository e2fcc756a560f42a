"""Timing methods side by side, shared by the offline benchmark (`bench.offline`) and tree_search's
step-cost probe: the run's prompts and their token ids, and the methods taking turns on each
prompt (the order rotating from prompt to prompt), one decode step each per turn, so that all of
them meet the same machine load.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from entmtp_vllm.bench.offline_config import OfflineBenchConfig


def bench_prompts(config: OfflineBenchConfig) -> list:
    """The run's prompts (`prompts.Prompt`), every data set in turn."""
    from entmtp_vllm.prompts import load_prompts

    prompts = []
    for dataset in config.datasets:
        prompts.extend(
            load_prompts(dataset, config.num_prompts, config.seed, config.split, config.category, config.data_path)
        )
    return prompts


def encode_prompts(config: OfflineBenchConfig, tokenizer, prompts: list) -> list[list[int]]:
    """Token ids of each prompt: the chat template applied, unless `config.raw`."""
    from entmtp_vllm.prompts import chat_text

    encoded = []
    for prompt in prompts:
        text = prompt.text if config.raw else chat_text(tokenizer, prompt.text)
        encoded.append(tokenizer(text, add_special_tokens=config.raw)["input_ids"])
    return encoded


def turn_order(labels: list[str], index: int) -> list[str]:
    """The order in which the methods take turns on prompt `index`: rotated by one per prompt,
    so that no method always goes first."""
    shift = index % len(labels)
    return labels[shift:] + labels[:shift]


def decode_in_turns(decoders: dict[str, Iterator]) -> dict[str, Any]:
    """Advance every `ReferenceEngine.decode` generator one step per turn, in the dict's order,
    until each has yielded its `Generation`; returns them by key. Each generation times only
    its own steps, so all of them meet the same machine load, within a turn of each other."""
    running = dict(decoders)
    done: dict[str, Any] = {}
    while running:
        for key in list(running):
            item = next(running[key])
            if item is not None:  # the Generation: this one is finished
                done[key] = item
                del running[key]
    return done


def turns_text(config: dict[str, Any]) -> str:
    """How the methods of a run (its JSON `config`) took turns, in words; runs made before
    `interleave` existed took turns prompt by prompt."""
    return "step by step" if config.get("interleave", "prompt") == "step" else "prompt by prompt"
