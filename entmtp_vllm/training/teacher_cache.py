"""Teacher cache: the base model's hidden states over self-distillation answers.

Head training never runs the 30-layer base model: it reads, for every answer
position, the base model's last hidden state (post final norm, fp16), the token
that followed it, and the teacher's top-k next-token distribution (the tied LM
head applied to that hidden state), all computed once here.

Layout of a cache folder:

- `manifest.json` — model, hidden/vocab size, dtype, topk and the list of shards,
  each with its split (`train` | `val`), file name, record ids and row count.
- `shard_XXXXX_<split>.safetensors` — tensors of a chunk of records:
  `hidden` fp16[n, H], `tokens` int32[n], `topk_ids` int32[n, K],
  `topk_logp` fp16[n, K] (log-softmax values of the full distribution), and
  `offsets` int64[r + 1] (row ranges of its r records).

Row j of a record is the hidden state at position `len(prompt) - 1 + j`: the one
whose next token is `answer_ids[j]`. So for a training position t = row j,
`tokens[j]` is the root token x_{t+1} and head i's target is `tokens[j + i]` with
teacher distribution taken from row `j + i`.

The build is incremental and resumable: records already listed in the manifest
are skipped, every chunk is written as its own shard and the manifest is
replaced atomically after each one. The validation split is chosen by a stable
hash of the record id, so re-running on a grown JSONL never moves a record.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from entmtp_vllm.errors import EntMTPError

MANIFEST = "manifest.json"
FORMAT = "entmtp-teacher-cache"
VERSION = 1


def split_of(record_id: str, val_pct: float = 4.0) -> str:
    """`val` for a stable `val_pct` percent of ids, else `train`."""
    digest = hashlib.sha1(f"teacher-split:{record_id}".encode()).digest()
    bucket = int.from_bytes(digest[:4], "big") % 10000
    return "val" if bucket < val_pct * 100 else "train"


def read_records(jsonl: Path) -> list[dict]:
    """Complete records of a self-distillation JSONL (a truncated last line is skipped)."""
    records = []
    if not jsonl.is_file():
        raise EntMTPError(f"self-distillation data {jsonl} does not exist: generate it first (entmtp train-heads --generate N)")
    with jsonl.open() as handle:
        for line in handle:
            try:
                rec = json.loads(line)
                if rec["answer_ids"] and rec["prompt_ids"]:
                    records.append(rec)
            except (ValueError, KeyError, TypeError):
                continue
    return records


def read_manifest(folder: Path) -> dict | None:
    path = Path(folder) / MANIFEST
    if not path.is_file():
        return None
    manifest = json.loads(path.read_text())
    if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise EntMTPError(f"{path} is not a version-{VERSION} teacher cache: delete the folder and rebuild it")
    return manifest


def _write_manifest(folder: Path, manifest: dict) -> None:
    tmp = folder / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1))
    os.replace(tmp, folder / MANIFEST)


def build_teacher_cache(
    model: str,
    data: Path,
    out: Path,
    topk: int = 32,
    dtype: str = "bfloat16",
    val_pct: float = 4.0,
    chunk_records: int = 64,
    max_batch_tokens: int = 4096,
    max_records: int | None = None,
    threads: int | None = None,
    log=print,
) -> dict:
    """Add every record of `data` not yet cached in `out`; return the manifest."""
    from transformers import AutoModelForCausalLM  # heavy import only here

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if threads:
        torch.set_num_threads(threads)
    all_records = read_records(Path(data))  # before the model loads: a missing file is one line
    torch_dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[dtype]
    base = AutoModelForCausalLM.from_pretrained(model, dtype=torch_dtype)
    base.eval()
    config = base.config
    lm_head = base.get_output_embeddings().weight  # [V, H]
    manifest = read_manifest(out) or {
        "format": FORMAT,
        "version": VERSION,
        "model": str(model),
        "model_name": Path(str(model)).name,
        "hidden_size": int(config.hidden_size),
        "vocab_size": int(config.vocab_size),
        "topk": topk,
        "dtype": dtype,
        "val_pct": val_pct,
        "shards": [],
    }
    if manifest["hidden_size"] != config.hidden_size or manifest["vocab_size"] != config.vocab_size:
        raise EntMTPError(f"teacher cache {out} was built for another model ({manifest['model']}): use a new --cache folder")
    topk = manifest["topk"]
    done = {rid for shard in manifest["shards"] for rid in shard["ids"]}
    records = [r for r in all_records if r["id"] not in done]
    if max_records is not None:
        records = records[:max_records]
    log(f"teacher cache {out}: {len(done)} records cached, {len(records)} new")
    started = time.perf_counter()
    new_tokens = 0
    for start in range(0, len(records), chunk_records):
        chunk = records[start : start + chunk_records]
        per_split: dict[str, list] = {"train": [], "val": []}
        # Sort by length so padded batches waste little.
        order = sorted(range(len(chunk)), key=lambda i: len(chunk[i]["prompt_ids"]) + len(chunk[i]["answer_ids"]))
        results: dict[int, tuple] = {}
        i = 0
        while i < len(order):
            batch = [order[i]]
            longest = len(chunk[order[i]]["prompt_ids"]) + len(chunk[order[i]]["answer_ids"])
            while i + len(batch) < len(order):
                nxt = order[i + len(batch)]
                length = len(chunk[nxt]["prompt_ids"]) + len(chunk[nxt]["answer_ids"])
                if max(longest, length) * (len(batch) + 1) > max_batch_tokens:
                    break
                batch.append(nxt)
                longest = max(longest, length)
            i += len(batch)
            seqs = [chunk[b]["prompt_ids"] + chunk[b]["answer_ids"] for b in batch]
            ids = torch.zeros(len(seqs), longest, dtype=torch.long)
            mask = torch.zeros(len(seqs), longest, dtype=torch.long)
            for row, seq in enumerate(seqs):
                ids[row, : len(seq)] = torch.tensor(seq)
                mask[row, : len(seq)] = 1
            with torch.inference_mode():
                hidden = base.model(input_ids=ids, attention_mask=mask).last_hidden_state
                for row, b in enumerate(batch):
                    p, a = len(chunk[b]["prompt_ids"]), len(chunk[b]["answer_ids"])
                    h = hidden[row, p - 1 : p - 1 + a]
                    logp = torch.log_softmax((h @ lm_head.T).float(), dim=-1)
                    top_logp, top_ids = logp.topk(topk, dim=-1)
                    results[b] = (
                        h.to(torch.float16),
                        torch.tensor(chunk[b]["answer_ids"], dtype=torch.int32),
                        top_ids.to(torch.int32),
                        top_logp.to(torch.float16),
                    )
        for b, rec in enumerate(chunk):
            per_split[split_of(rec["id"], manifest["val_pct"])].append((rec["id"], results[b]))
        for split, items in per_split.items():
            if not items:
                continue
            index = len(manifest["shards"])
            name = f"shard_{index:05d}_{split}.safetensors"
            lengths = [item[1][1].numel() for item in items]
            offsets = torch.tensor([0] + lengths).cumsum(0)
            tensors = {
                "hidden": torch.cat([item[1][0] for item in items]).contiguous(),
                "tokens": torch.cat([item[1][1] for item in items]).contiguous(),
                "topk_ids": torch.cat([item[1][2] for item in items]).contiguous(),
                "topk_logp": torch.cat([item[1][3] for item in items]).contiguous(),
                "offsets": offsets.to(torch.int64),
            }
            if not torch.isfinite(tensors["hidden"]).all():
                raise EntMTPError("teacher hidden states overflow fp16: rebuild the cache with another dtype")
            save_file(tensors, str(out / name))
            manifest["shards"].append(
                {"file": name, "split": split, "ids": [item[0] for item in items], "rows": int(offsets[-1])}
            )
            new_tokens += int(offsets[-1])
        _write_manifest(out, manifest)
        elapsed = time.perf_counter() - started
        log(
            f"cached {start + len(chunk)}/{len(records)} records, {new_tokens} answer tokens "
            f"({new_tokens / max(elapsed, 1e-9):.0f} answer tok/s)"
        )
    _write_manifest(out, manifest)
    return manifest


@dataclass
class CacheSplit:
    """One split of a teacher cache, concatenated in memory."""

    hidden: torch.Tensor  # fp16 [n, H]
    tokens: torch.Tensor  # long [n]
    topk_ids: torch.Tensor  # long [n, K]
    topk_logp: torch.Tensor  # float [n, K]
    record_end: torch.Tensor  # long [n]: exclusive end row of each row's record
    num_records: int

    @property
    def rows(self) -> int:
        return int(self.tokens.numel())


def load_cache_split(folder: Path, split: str) -> CacheSplit:
    """Concatenate every shard of `split` (`train` or `val`)."""
    manifest = read_manifest(Path(folder))
    if manifest is None:
        raise EntMTPError(f"{folder} has no teacher cache ({MANIFEST} missing): build it first")
    parts = [load_file(str(Path(folder) / s["file"])) for s in manifest["shards"] if s["split"] == split]
    if not parts:
        raise EntMTPError(f"teacher cache {folder} has no '{split}' records: cache more data")
    ends, base, records = [], 0, 0
    for part in parts:
        offsets = part["offsets"]
        lengths = offsets[1:] - offsets[:-1]
        ends.append(torch.repeat_interleave(offsets[1:] + base, lengths))
        base += int(offsets[-1])
        records += lengths.numel()
    return CacheSplit(
        hidden=torch.cat([p["hidden"] for p in parts]),
        tokens=torch.cat([p["tokens"] for p in parts]).long(),
        topk_ids=torch.cat([p["topk_ids"] for p in parts]).long(),
        topk_logp=torch.cat([p["topk_logp"] for p in parts]).float(),
        record_end=torch.cat(ends),
        num_records=records,
    )


def cache_summary(folder: Path) -> dict:
    """Records and answer tokens per split, from the manifest."""
    manifest = read_manifest(Path(folder)) or {"shards": []}
    summary: dict = {}
    for split in ("train", "val"):
        shards = [s for s in manifest["shards"] if s["split"] == split]
        summary[split] = {"records": sum(len(s["ids"]) for s in shards), "tokens": sum(s["rows"] for s in shards)}
    return summary


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description="build or extend a teacher cache")
    parser.add_argument("--model", default=None)
    parser.add_argument("--data", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--topk", type=int, default=32)
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-records", type=int, default=None)
    args = parser.parse_args(argv)
    from entmtp_vllm.model_store import resolve_model

    build_teacher_cache(
        resolve_model(args.model), Path(args.data), Path(args.out), topk=args.topk, dtype=args.dtype,
        threads=args.threads, max_records=args.max_records, log=lambda m: print(m, flush=True),
    )


if __name__ == "__main__":
    main()
