"""The Ray Serve proxy's cost (issue #20, Measure): `entmtp bench serve` against `entmtp serve`
directly and against the shipped Serve config's app (one replica, same engine settings) on a local
2-CPU Ray cluster, same prompts, concurrency 1 and 8, servers one after another (never both up),
rounds in A B B A order. Writes `direct_<r>.json`, `ray_<r>.json`, `proxy_cost.md`.

    .venv/bin/python docs/results/serving/ray_proxy_cost/run.py [--rounds 2] [-n 16]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[4]
HERE = Path(__file__).resolve().parent


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--out", type=Path, default=HERE)
    p.add_argument("--rounds", type=int, default=2, help="rounds; round r runs direct→ray for even r, ray→direct for odd")
    p.add_argument("-n", "--num-prompts", type=int, default=16)
    p.add_argument("--concurrency", default="1,8")
    p.add_argument("--max-tokens", type=int, default=64)
    return p.parse_args()


def app_args() -> dict:
    (app,) = yaml.safe_load((ROOT / "deploy/ray/serve_config.yaml").read_text())["applications"]
    return app["args"]


def bench(base_url: str, args: argparse.Namespace, metrics_from: str = "server") -> dict:
    from entmtp_vllm.bench.serve import ServeBenchConfig, make_config, run_serve_bench

    config = make_config(ServeBenchConfig, base_url=base_url, datasets=["mt_bench"], split="test",
                         num_prompts=args.num_prompts, concurrency=[int(c) for c in args.concurrency.split(",")],
                         max_tokens=args.max_tokens, metrics_from=metrics_from, warmup=2)
    return run_serve_bench(config, progress=False)


def run_direct(args: argparse.Namespace, model_path: str, log: Path) -> dict:
    """`entmtp serve` with the Serve config's settings (as tests/deploy/test_ray_serve_e2e.py)."""
    from entmtp_vllm.bench.serve import ServerProcess, free_port

    cfg = app_args()
    engine = cfg["engine_kwargs"]
    port = free_port()
    script = Path(sys.executable).with_name("entmtp")
    command = [str(script), "serve", "--model", model_path, "--acceptance", cfg["entmtp"]["acceptance"], "--",
               "--host", "127.0.0.1", "--port", str(port), "--served-model-name", "entmtp",
               "--max-model-len", str(engine["max_model_len"]), "--max-num-seqs", str(engine["max_num_seqs"]),
               "--kv-cache-memory-bytes", str(engine["kv_cache_memory_bytes"]), "--seed", str(engine["seed"])]
    env = {k: v for k, v in os.environ.items() if k != "VLLM_ENABLE_V1_MULTIPROCESSING"}
    base_url = f"http://127.0.0.1:{port}/v1"
    process = ServerProcess(command, log, base_url, env=env, name="entmtp serve")
    try:
        process.wait_healthy(900)
        return bench(base_url, args)
    finally:
        process.stop()


def run_ray(args: argparse.Namespace) -> dict:
    import ray
    from ray import serve

    from entmtp_vllm.bench.serve import free_port
    from entmtp_vllm.ray_serve import build_app

    metrics_dir = tempfile.mkdtemp(prefix="entmtp-ray-metrics-")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    try:
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        serve.run(build_app({**app_args(), "metrics_dir": metrics_dir}), name="entmtp", route_prefix="/")
        return bench(f"http://127.0.0.1:{port}/v1", args, metrics_from=f"ray:{metrics_dir}")
    finally:
        try:
            serve.shutdown()
        finally:
            ray.shutdown()


def table(runs: dict[str, list[dict]]) -> str:
    """Per concurrency: each way's median over rounds, and Ray's ratio to direct."""
    keys = (("output tok/s", lambda lv: lv["output_tokens_per_s"]), ("TTFT p50 ms", lambda lv: lv["ttft_ms"]["p50"]),
            ("TPOT p50 ms", lambda lv: lv["tpot_ms"]["p50"]),
            ("τ", lambda lv: (lv.get("acceptance") or {}).get("mean_acceptance_length")))
    levels = [lv["concurrency"] for lv in runs["direct"][0]["levels"]]
    lines = ["| concurrency | " + " | ".join(f"{name}: direct / Ray / ratio" for name, _ in keys) + " | failed |",
             "|---:|" + "---:|" * (len(keys) + 1)]
    for i, c in enumerate(levels):
        cells = []
        for _, get in keys:
            d = [get(r["levels"][i]) for r in runs["direct"]]
            y = [get(r["levels"][i]) for r in runs["ray"]]
            if None in d or None in y:
                cells.append("–")
                continue
            md, my = statistics.median(d), statistics.median(y)
            cells.append(f"{md:.2f} / {my:.2f} / {my / md:.3f}×")
        failed = sum(r["levels"][i]["failed"] for way in runs.values() for r in way)
        lines.append(f"| {c} | " + " | ".join(cells) + f" | {failed} |")
    return "\n".join(lines)


def main() -> None:
    args = parse_args()
    from entmtp_vllm.model_store import resolve_model

    model_path = resolve_model(None)
    args.out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict]] = {"direct": [], "ray": []}
    for r in range(args.rounds):
        for way in (("direct", "ray") if r % 2 == 0 else ("ray", "direct")):
            print(f"round {r}: {way}", flush=True)
            result = run_direct(args, model_path, args.out / f"direct_{r}.log") if way == "direct" else run_ray(args)
            (args.out / f"{way}_{r}.json").write_text(json.dumps(result, indent=1) + "\n")
            runs[way].append(result)
    text = (f"# Ray Serve proxy against `entmtp serve` directly\n\nSame engine settings "
            f"(`deploy/ray/serve_config.yaml`), {args.num_prompts} MT-bench test prompts, {args.max_tokens} tokens, greedy, "
            f"medians over {args.rounds} rounds (A B B A). Ray: one replica, counters from its metrics folder.\n\n"
            + table(runs) + "\n")
    (args.out / "proxy_cost.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
