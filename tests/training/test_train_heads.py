"""Tests for entmtp_vllm/training/teacher_cache.py and train_heads.py with a tiny random base."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.heads.checkpoint import load_base_embeddings, load_heads, read_heads_config
from entmtp_vllm.training.teacher_cache import build_teacher_cache, cache_summary, load_cache_split, read_manifest, split_of
from entmtp_vllm.training.train_config import BaseTensors, TrainConfig
from entmtp_vllm.training.train_heads import train_heads

VOCAB, HIDDEN = 64, 32


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                         max_position_embeddings=128)
    model = LlamaForCausalLM(config).eval()
    folder = tmp_path_factory.mktemp("tiny_model")
    model.save_pretrained(folder)
    return folder


def greedy_records(model_dir: Path, n: int, answer_len: int = 24, seed: int = 0) -> list[dict]:
    """Self-distillation records: the tiny model's greedy continuations of random prompts."""
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(model_dir).eval()
    gen = torch.Generator().manual_seed(seed)
    records = []
    for i in range(n):
        prompt = torch.randint(VOCAB, (6,), generator=gen).tolist()
        seq = list(prompt)
        with torch.no_grad():
            for _ in range(answer_len):
                seq.append(int(model(torch.tensor([seq])).logits[0, -1].argmax()))
        records.append({"id": f"rec{seed}-{i}", "prompt_ids": prompt, "answer_ids": seq[len(prompt):]})
    return records


def write_jsonl(path: Path, records: list[dict], truncated_tail: bool = False) -> None:
    with path.open("a") as handle:
        for rec in records:
            handle.write(json.dumps(rec) + "\n")
        if truncated_tail:
            handle.write('{"id": "partial", "prompt_ids": [1, 2')


@pytest.fixture(scope="module")
def cache(tiny_model: Path, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("data")
    write_jsonl(folder / "answers.jsonl", greedy_records(tiny_model, 24), truncated_tail=True)
    out = folder / "cache"
    build_teacher_cache(str(tiny_model), folder / "answers.jsonl", out, topk=8, dtype="float32", val_pct=25,
                        chunk_records=10, max_batch_tokens=200, log=lambda m: None)
    return out


def base_tensors(model_dir: Path) -> BaseTensors:
    embed, lm_head, config = load_base_embeddings(model_dir)
    return BaseTensors(embed, lm_head, "tiny", config)


def test_cache_holds_the_models_hidden_states(tiny_model: Path, cache: Path) -> None:
    from transformers import LlamaForCausalLM

    manifest = read_manifest(cache)
    assert manifest["hidden_size"] == HIDDEN and manifest["topk"] == 8
    ids = [i for s in manifest["shards"] for i in s["ids"]]
    assert len(ids) == 24 and "partial" not in ids
    for shard in manifest["shards"]:
        assert all(split_of(i, 25) == shard["split"] for i in shard["ids"])
    summary = cache_summary(cache)
    assert summary["train"]["records"] + summary["val"]["records"] == 24
    assert summary["val"]["records"] > 0 and summary["train"]["tokens"] == summary["train"]["records"] * 24
    # first training record, checked against a direct forward pass
    train = load_cache_split(cache, "train")
    first_id = next(s for s in manifest["shards"] if s["split"] == "train")["ids"][0]
    record = next(json.loads(l) for l in (cache.parent / "answers.jsonl").read_text().splitlines()[:-1] if json.loads(l)["id"] == first_id)
    model = LlamaForCausalLM.from_pretrained(tiny_model).eval()
    seq = torch.tensor([record["prompt_ids"] + record["answer_ids"]])
    with torch.no_grad():
        hidden = model.model(seq).last_hidden_state[0, 5 : 5 + 24]
        logp = torch.log_softmax(model(seq).logits[0, 5 : 5 + 24], -1)
    torch.testing.assert_close(train.hidden[:24].float(), hidden, atol=2e-3, rtol=2e-3)
    assert train.tokens[:24].tolist() == record["answer_ids"]
    assert train.topk_ids[:24, 0].tolist() == logp.argmax(-1).tolist() == record["answer_ids"]
    torch.testing.assert_close(train.topk_logp[:24], logp.topk(8).values, atol=2e-3, rtol=2e-3)
    assert train.record_end[:24].tolist() == [24] * 24


def test_cache_is_incremental(tiny_model: Path, cache: Path) -> None:
    log: list[str] = []
    build_teacher_cache(str(tiny_model), cache.parent / "answers.jsonl", cache, dtype="float32", val_pct=25, log=log.append)
    assert "0 new" in log[0]
    shards = len(read_manifest(cache)["shards"])
    data = cache.parent / "more.jsonl"
    data.write_text((cache.parent / "answers.jsonl").read_text().rsplit("\n", 1)[0] + "\n")
    write_jsonl(data, greedy_records(tiny_model, 3, seed=5))
    copy = cache.parent / "cache_copy"
    import shutil

    shutil.copytree(cache, copy)
    build_teacher_cache(str(tiny_model), data, copy, dtype="float32", log=log.append)
    assert "24 records cached, 3 new" in log[-2]
    assert sum(len(s["ids"]) for s in read_manifest(copy)["shards"]) == 27
    assert len(read_manifest(copy)["shards"]) > shards


def test_missing_cache_or_data_is_a_user_error(tmp_path: Path, tiny_model: Path) -> None:
    with pytest.raises(EntMTPError):
        load_cache_split(tmp_path, "train")
    with pytest.raises(EntMTPError, match="does not exist"):
        build_teacher_cache(str(tiny_model), tmp_path / "none.jsonl", tmp_path / "c", log=lambda m: None)


def config(cache: Path, work: Path, **kwargs) -> TrainConfig:
    base = dict(cache=cache, work_dir=work, num_heads=3, batch_size=64, lr=1e-2, warmup=2, eval_interval=5,
                ckpt_interval=5, eval_positions=200, threads=1, progress=False, softmax_vocab=None)
    return TrainConfig(**{**base, **kwargs})


@pytest.mark.parametrize("kind,teacher,vocab", [("hydra", "topk", None), ("medusa", "topk", None), ("hydra", "hard", 16), ("hydra", "full", None)])
def test_tiny_training_lowers_the_loss(tiny_model: Path, cache: Path, tmp_path: Path, kind, teacher, vocab) -> None:
    result = train_heads(config(cache, tmp_path, kind=kind, steps=30, teacher=teacher, softmax_vocab=vocab),
                         base_tensors(tiny_model), log=lambda m: None)
    log = [json.loads(l) for l in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [5, 10, 15, 20, 25, 30]
    assert log[-1]["loss"] < log[0]["loss"]
    if teacher != "full":  # KL to a near-uniform teacher need not lower the greedy token's NLL
        assert sum(log[-1]["val"]["nll"]) < sum(log[0]["val"]["nll"])
    assert result["steps"] == 30 and len(result["val"]["top1"]) == 3


def test_prefix_layer_training_runs(tiny_model: Path, cache: Path, tmp_path: Path) -> None:
    result = train_heads(config(cache, tmp_path, prefix_layer=True, window=8, steps=10, out=tmp_path / "heads"),
                         base_tensors(tiny_model), log=lambda m: None)
    log = [json.loads(l) for l in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    assert log[-1]["loss"] < log[0]["loss"] or result["steps"] == 10
    # the trained layer drafts as it was trained: an 8-position window over answer rows
    prefix = load_heads(tmp_path / "heads", {"hidden_size": HIDDEN, "vocab_size": VOCAB}).prefix.config
    assert (prefix.window, prefix.context) == (8, "answer")
    card = (tmp_path / "heads" / "MODEL_CARD.md").read_text()
    assert "with a Hydra++ prefix layer (a 8-position window over the answer)" in card
    assert "generation settings not recorded" in card and "transformers float32" in card


def test_the_model_card_names_the_generation_settings(tiny_model: Path, cache: Path, tmp_path: Path) -> None:
    from entmtp_vllm.training.selfdistill_data import meta_path, read_meta

    data = tmp_path / "answers.jsonl"  # the card reads only the settings beside it
    meta_path(data).write_text(json.dumps({"dtype": "float32", "max_answer_tokens": 64, "max_prompt_tokens": 32}))
    assert read_meta(data)["dtype"] == "float32" and read_meta(tmp_path / "none.jsonl") == {}
    train_heads(config(cache, tmp_path, steps=2, data=data, out=tmp_path / "heads"), base_tensors(tiny_model), log=lambda m: None)
    card = (tmp_path / "heads" / "MODEL_CARD.md").read_text()
    assert "(vLLM-cpu, float32, ≤ 64 answer / 32 prompt tokens)" in card


def test_the_export_writes_the_draft_vocabulary_of_the_training_answers(tiny_model: Path, cache: Path, tmp_path: Path) -> None:
    """`draft_vocab.json` beside the heads: the training answers' most frequent tokens, most
    frequent first, loadable by the drafter's loader; `draft_vocab=None` removes a stale one."""
    from collections import Counter

    from entmtp_vllm.heads.draft_vocab import FILE_NAME, load_draft_vocab
    from entmtp_vllm.training.teacher_cache import load_cache_split

    out = tmp_path / "heads"
    train_heads(config(cache, tmp_path, steps=2, out=out, draft_vocab=10), base_tensors(tiny_model), log=lambda m: None)
    counts = Counter(load_cache_split(cache, "train").tokens.tolist())
    ids = load_draft_vocab(out, VOCAB).tolist()
    assert len(ids) == 10 and [counts[t] for t in ids] == sorted((counts[t] for t in ids), reverse=True)
    assert min(counts[t] for t in ids) >= max(c for t, c in counts.items() if t not in ids)
    card = (out / "MODEL_CARD.md").read_text()
    assert "lists the 10 answer tokens the training records use most often" in card
    assert read_heads_config(out)["draft_vocab_size"] == 10
    train_heads(config(cache, tmp_path / "again", steps=2, out=out, draft_vocab=None), base_tensors(tiny_model), log=lambda m: None)
    assert not (out / FILE_NAME).exists()
    assert "draft vocabulary: none" in (out / "MODEL_CARD.md").read_text()
    assert read_heads_config(out)["draft_vocab_size"] is None


def test_the_export_records_the_model_the_heads_were_trained_on(tiny_model: Path, cache: Path, tmp_path: Path) -> None:
    """The exported config's verifier record is the training model's, as read from its folder;
    the record refuses another model of the same shape."""
    from safetensors.torch import save_file

    from entmtp_vllm.heads.verifier import check_folder, record_of_folder

    out = tmp_path / "heads"
    train_heads(config(cache, tmp_path, steps=2, out=out), base_tensors(tiny_model), log=lambda m: None)
    saved = read_heads_config(out)
    assert saved["verifier"] == record_of_folder(tiny_model, "tiny").to_json()
    assert saved["verifier"]["architecture"] == "LlamaForCausalLM" and saved["verifier"]["tied_embeddings"] is True
    assert check_folder(saved, tiny_model, str(out)) is None
    embed, _, model_config = load_base_embeddings(tiny_model)
    other = tmp_path / "other"
    other.mkdir()
    save_file({"model.embed_tokens.weight": torch.randn_like(embed) * embed.std()}, str(other / "model.safetensors"))
    (other / "config.json").write_text(json.dumps(model_config))
    with pytest.raises(EntMTPError, match=r"draft for tiny \(LlamaForCausalLM\), not for other \(LlamaForCausalLM\)"):
        check_folder(saved, other, str(out))


def test_resume_continues_the_step_count(tiny_model: Path, cache: Path, tmp_path: Path) -> None:
    base = base_tensors(tiny_model)
    train_heads(config(cache, tmp_path, steps=10), base, log=lambda m: None)
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("*.pt")) == ["step_0000005.pt", "step_0000010.pt"]
    messages: list[str] = []
    result = train_heads(config(cache, tmp_path, steps=15, resume=True, out=tmp_path / "heads"), base, log=messages.append)
    assert any("resumed from" in m and "step 10" in m for m in messages)
    assert result["steps"] == 15
    steps = [json.loads(l)["step"] for l in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    assert steps == [5, 10, 15]
    heads = load_heads(tmp_path / "heads", {"hidden_size": HIDDEN, "vocab_size": VOCAB})
    assert heads.num_heads == 3 and heads.meta["training"]["steps"] == 15
    card = (tmp_path / "heads" / "MODEL_CARD.md").read_text()
    assert "Held-out accuracy" in card and "answer tokens" in card


def test_init_heads_starts_from_saved_heads_and_checks_their_shape(tiny_model: Path, cache: Path, tmp_path: Path) -> None:
    """`init_heads`: step 0 scores the saved heads exactly (the log's first line), training goes on
    from them, the card and config.json name them; heads of another shape are refused in one line."""
    base = base_tensors(tiny_model)
    first = train_heads(config(cache, tmp_path / "a", steps=10, out=tmp_path / "first"), base, log=lambda m: None)
    messages: list[str] = []
    work = tmp_path / "b"
    result = train_heads(config(cache, work, steps=5, lr=1e-3, init_heads=tmp_path / "first", out=tmp_path / "second",
                                export="best"), base, log=messages.append)
    log = [json.loads(l) for l in (work / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [0, 5]
    saved = load_heads(tmp_path / "first", {"hidden_size": HIDDEN, "vocab_size": VOCAB}).meta["training"]
    # the saved heads are fp16: their step-0 score is theirs, not a fresh initialisation's
    assert log[0]["val"]["top1"] == saved["val_top1"] == first["val"]["top1"]
    assert any("initialised from the heads in" in m for m in messages)
    meta = load_heads(tmp_path / "second", {"hidden_size": HIDDEN, "vocab_size": VOCAB}).meta["training"]
    assert meta["initialised_from"]["steps"] == 10 and meta["initialised_from"]["folder"] == str(tmp_path / "first")
    assert result["exported"]["step"] in (0, 5)
    assert "initialised from the heads in" in (tmp_path / "second" / "MODEL_CARD.md").read_text()
    with pytest.raises(EntMTPError, match=r"has layers 1 \(this run: 2\)"):
        train_heads(config(cache, tmp_path / "c", steps=2, num_layers=2, init_heads=tmp_path / "first"), base, log=lambda m: None)
    with pytest.raises(EntMTPError, match=r"kind hydra \(this run: medusa\)"):
        train_heads(config(cache, tmp_path / "d", steps=2, kind="medusa", init_heads=tmp_path / "first"), base, log=lambda m: None)


def test_init_heads_without_a_prefix_layer_start_a_hydrapp_run_where_they_stand(tiny_model: Path, cache: Path, tmp_path: Path) -> None:
    """Plain heads may start a Hydra++ run: the fresh prefix layer is the identity, so step 0
    scores what the plain heads score; Hydra++ heads cannot start a plain run."""
    base = base_tensors(tiny_model)
    first = train_heads(config(cache, tmp_path / "a", steps=10, out=tmp_path / "plain"), base, log=lambda m: None)
    messages: list[str] = []
    train_heads(config(cache, tmp_path / "b", steps=5, prefix_layer=True, window=8, init_heads=tmp_path / "plain",
                       out=tmp_path / "pp"), base, log=messages.append)
    log = [json.loads(l) for l in (tmp_path / "b" / "train_log.jsonl").read_text().splitlines()]
    assert log[0]["step"] == 0 and log[0]["val"]["top1"] == first["val"]["top1"]
    assert any("prefix layer starts fresh" in m for m in messages)
    with pytest.raises(EntMTPError, match=r"prefix layer True \(this run: False\)"):
        train_heads(config(cache, tmp_path / "c", steps=2, init_heads=tmp_path / "pp"), base, log=lambda m: None)
    with pytest.raises(EntMTPError, match=r"window=8.*window=4"):  # the same weights' shapes, another layer
        train_heads(config(cache, tmp_path / "d", steps=2, prefix_layer=True, window=4, init_heads=tmp_path / "pp"),
                    base, log=lambda m: None)


def test_the_best_evaluation_is_kept_and_can_be_exported(tiny_model: Path, cache: Path, tmp_path: Path) -> None:
    """`best.pt` holds the heads of the evaluation with the best mean held-out top-1, survives a
    resume, and `export="best"` writes those heads (and their accuracy) instead of the last."""
    import torch

    base = base_tensors(tiny_model)
    train_heads(config(cache, tmp_path, steps=10), base, log=lambda m: None)
    result = train_heads(config(cache, tmp_path, steps=20, lr=5.0, resume=True, export="best", out=tmp_path / "heads"),
                         base, log=lambda m: None)  # a learning rate that wrecks the heads after step 10
    log = [json.loads(l) for l in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    means = {r["step"]: sum(r["val"]["top1"]) / len(r["val"]["top1"]) for r in log}
    best_step = max(means, key=lambda s: (means[s], -s))  # the first of equal bests
    assert result["best"]["step"] == best_step
    kept = torch.load(tmp_path / "best.pt", weights_only=False)
    assert kept["best"]["step"] == best_step
    assert best_step < 20 and result["exported"] == {"heads": "best", "step": best_step}
    heads = load_heads(tmp_path / "heads", {"hidden_size": HIDDEN, "vocab_size": VOCAB})
    for name, value in heads.state_dict().items():  # stored as float16
        assert torch.equal(value.float(), kept["heads"][name].half().float()), name
    assert heads.meta["training"]["val_top1"] == kept["best"]["val"]["top1"]


def test_the_best_is_scored_again_when_the_held_out_set_changes(tiny_model: Path, cache: Path, tmp_path: Path) -> None:
    """A resume over the same held-out positions keeps the best's score; over other positions (a
    grown or rebuilt cache) it scores the kept heads again there, so later evaluations compare
    with the best on the same positions."""
    import torch

    from entmtp_vllm.training.teacher_cache import load_cache_split
    from entmtp_vllm.training.train_heads import _eval_rows, build_heads_for, evaluate

    base = base_tensors(tiny_model)
    train_heads(config(cache, tmp_path, steps=10), base, log=lambda m: None)
    before = torch.load(tmp_path / "best.pt", weights_only=False)["best"]
    same: list[str] = []
    train_heads(config(cache, tmp_path, steps=10, resume=True), base, log=same.append)
    assert not any("held-out set changed" in m for m in same)
    assert torch.load(tmp_path / "best.pt", weights_only=False)["best"] == before

    other = config(cache, tmp_path, steps=10, resume=True, eval_positions=40)  # another set of positions
    messages: list[str] = []
    result = train_heads(other, base, log=messages.append)
    assert any(f"best heads (step {before['step']}) scored again" in m for m in messages)
    kept = torch.load(tmp_path / "best.pt", weights_only=False)
    assert kept["best"]["step"] == before["step"] and kept["best"]["eval_key"] != before["eval_key"]
    val = load_cache_split(cache, "val")
    heads = build_heads_for(other, base)
    heads.load_state_dict(kept["heads"])
    expected = evaluate(heads, val, base, _eval_rows(val, other))
    assert expected["positions"] == 40 and kept["best"]["val"] == expected
    assert result["best"]["mean_top1"] == round(sum(expected["top1"]) / 3, 4)


def test_sigterm_stops_after_the_step_with_a_checkpoint(tiny_model: Path, cache: Path, tmp_path: Path) -> None:
    """A SIGTERM during training ends the run after the current step, checkpointed there (not at
    the last `ckpt_interval` step), exports nothing, and puts the previous handler back."""
    import os
    import signal

    before = signal.getsignal(signal.SIGTERM)
    messages: list[str] = []

    def log(message: str) -> None:
        messages.append(message)
        if message.startswith("step 5/"):  # the first evaluation: a job is stopped from outside
            os.kill(os.getpid(), signal.SIGTERM)

    result = train_heads(config(cache, tmp_path, steps=30, ckpt_interval=100, out=tmp_path / "heads"),
                         base_tensors(tiny_model), log=log)
    assert result == {"kind": "hydra", "steps": 5, "planned_steps": 30, "interrupted": True}
    assert [p.name for p in (tmp_path / "checkpoints").glob("*.pt")] == ["step_0000005.pt"]
    assert not (tmp_path / "heads").exists()
    assert any("stopped by signal 15 at step 5/30" in m for m in messages)
    assert signal.getsignal(signal.SIGTERM) is before
    resumed = train_heads(config(cache, tmp_path, steps=10, resume=True), base_tensors(tiny_model), log=lambda m: None)
    assert resumed["steps"] == 10


def test_time_budget_stops_and_saves(tiny_model: Path, cache: Path, tmp_path: Path) -> None:
    result = train_heads(config(cache, tmp_path, steps=10_000, time_budget_s=1e-6), base_tensors(tiny_model), log=lambda m: None)
    assert result["stopped_early"] and result["steps"] < 10_000
    assert list((tmp_path / "checkpoints").glob("*.pt"))


def test_cli_train_heads_end_to_end(tiny_model: Path, cache: Path, tmp_path: Path, capsys) -> None:
    from entmtp_vllm.cli.main import main

    data = cache.parent / "answers.jsonl"
    argv = ["train-heads", "--model", str(tiny_model), "--data", str(data), "--cache", str(tmp_path / "cache"),
            "--cache-dtype", "float32", "--kind", "medusa", "--num-heads", "2", "--steps", "4", "--batch-size", "32",
            "--eval-interval", "2", "--ckpt-interval", "2", "--threads", "1", "--softmax-vocab", "0",
            "--work-dir", str(tmp_path / "work"), "--out", str(tmp_path / "heads")]
    assert main(argv) == 0
    assert "heads written to" in capsys.readouterr().out
    heads = load_heads(tmp_path / "heads", {"hidden_size": HIDDEN, "vocab_size": VOCAB})
    assert heads.kind == "medusa" and heads.num_heads == 2
    # a finished run resumed exports again without training, here as int8
    assert main(argv[:-4] + ["--work-dir", str(tmp_path / "work"), "--out", str(tmp_path / "int8"), "--resume", "--no-cache-update",
                             "--weights", "int8"]) == 0
    assert read_heads_config(tmp_path / "int8")["dtype"] == "int8" and heads.meta["dtype"] == "float16"
    assert "Weights: int8 (a float32 scale per output row" in (tmp_path / "int8" / "MODEL_CARD.md").read_text()
    assert load_heads(tmp_path / "int8", {"hidden_size": HIDDEN, "vocab_size": VOCAB}).num_heads == 2


def test_cli_reports_a_stopped_run(tiny_model: Path, cache: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    """SIGTERM during `entmtp train-heads`: exit status 143, a line saying where it stopped."""
    import os
    import signal

    from entmtp_vllm.cli.main import main
    from entmtp_vllm.training import train_heads as module

    evaluate = module.evaluate

    def stopped_from_outside(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)  # the first evaluation runs inside the training loop
        return evaluate(*args, **kwargs)

    monkeypatch.setattr(module, "evaluate", stopped_from_outside)
    argv = ["train-heads", "--model", str(tiny_model), "--data", str(cache.parent / "answers.jsonl"), "--cache", str(cache),
            "--no-cache-update", "--num-heads", "2", "--steps", "50", "--batch-size", "32", "--eval-interval", "2",
            "--threads", "1", "--work-dir", str(tmp_path / "work"), "--out", str(tmp_path / "heads")]
    assert main(argv) == 143
    assert "interrupted at step 2 of 50: nothing exported; --resume continues" in capsys.readouterr().out
    assert not (tmp_path / "heads").exists()


def test_cli_user_errors(tmp_path: Path, capsys) -> None:
    from entmtp_vllm.cli.main import main

    assert main(["train-heads", "--kind", "medusa", "--prefix-layer", "--out", str(tmp_path)]) == 2
    assert "--prefix-layer needs --kind hydra" in capsys.readouterr().err
    assert main(["train-heads", "--num-heads", "0", "--out", str(tmp_path)]) == 2
    assert main(["train-heads", "--gen-chunk", "0", "--stop-after", "generate"]) == 2
    assert "--gen-chunk must be at least 1" in capsys.readouterr().err
    assert main(["train-heads", "--draft-vocab", "-1", "--out", str(tmp_path)]) == 2
    assert "--draft-vocab must be 0 (the full vocabulary) or a token count" in capsys.readouterr().err
    assert main(["train-heads", "--model", str(tmp_path / "nope"), "--out", str(tmp_path)]) == 2
