"""An archive of self-distillation answers that travels in git: only the generated tokens.

The answers JSONL (`selfdistill_data.py`) holds `{"id", "prompt_ids", "answer_ids"}`; the prompt
ids are the prompt set's text, tokenized, so they belong to the prompt set's package, not to this
project. The archive keeps the generation settings and, per record, only `id` and `answer_ids`
(the base model's own greedy answers, which this project generated), gzip-compressed, in the
JSONL's record order. Restoring re-encodes each prompt from the prompt set with the same
function generation used (`encode_prompt`), so the restored JSONL equals the original, and a
generation run resumes after the restored records.
"""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.prompts import Prompt
from entmtp_vllm.training.selfdistill_data import done_ids, encode_prompt, read_meta, write_meta


def pack_answers(data: Path, archive: Path) -> int:
    """Write `data`'s answers (no prompts) and settings to the gzip archive; return the records."""
    settings = read_meta(data)
    if not settings:
        raise EntMTPError(f"{data}: no generation settings beside it ({data.name}.meta.json): not a generated answers file")
    count = 0
    archive.parent.mkdir(parents=True, exist_ok=True)
    # mtime=0: the same answers give the same bytes, so archiving again leaves git clean
    with gzip.GzipFile(archive, "wb", mtime=0) as raw, io.TextIOWrapper(raw, encoding="utf-8") as out, data.open() as records:
        out.write(json.dumps({"settings": settings}) + "\n")
        for line in records:
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a truncated last line (an interrupted chunk)
            out.write(json.dumps({"id": record["id"], "answer_ids": record["answer_ids"]}) + "\n")
            count += 1
    return count


def restore_answers(archive: Path, data: Path, model: str, prompts: list[Prompt], log=print) -> int:
    """Append to `data` the archived answers it lacks, each prompt re-encoded from `prompts`
    (which must hold every archived id); return the records added."""
    from transformers import AutoTokenizer

    if not archive.is_file():
        raise EntMTPError(f"answers archive {archive} does not exist")
    with gzip.open(archive, "rt") as handle:
        lines = handle.read().splitlines()
    settings = json.loads(lines[0]).get("settings") if lines else None
    if not settings:
        raise EntMTPError(f"{archive}: no settings line first: not an answers archive (entmtp train-heads --archive-answers)")
    if Path(settings["model"]).name != Path(model).name:
        raise EntMTPError(f"{archive} holds answers of {Path(settings['model']).name}, not of {Path(model).name}")
    by_id = {prompt.id: prompt for prompt in prompts}
    have = done_ids(data)
    todo = [json.loads(line) for line in lines[1:]]
    todo = [record for record in todo if record["id"] not in have]
    missing = [record["id"] for record in todo if record["id"] not in by_id]
    if missing:
        raise EntMTPError(f"{archive}: {len(missing)} archived ids are not in the prompt set (e.g. {missing[0]})")
    write_meta(data, {**settings, "model": str(model)})
    tokenizer = AutoTokenizer.from_pretrained(model)
    data.parent.mkdir(parents=True, exist_ok=True)
    with data.open("a") as out:
        for record in todo:
            prompt_ids = encode_prompt(tokenizer, by_id[record["id"]].text, settings["max_prompt_tokens"])
            out.write(json.dumps({"id": record["id"], "prompt_ids": prompt_ids, "answer_ids": record["answer_ids"]}) + "\n")
    log(f"restored {len(todo)} answers from {archive} ({len(have)} already in {data})")
    return len(todo)
