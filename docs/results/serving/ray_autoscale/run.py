"""Ray Serve autoscaling of EntMTP replicas on a local 2-CPU Ray cluster (issue #20, item 2).

The shipped Serve config's app with `autoscaling_config` {min 1, max 2 replicas, target 1 ongoing
request}: idle, then CONCURRENCY clients send greedy chats back to back (Serve scales up to two
replicas; both must draft, read from their own `entmtp_` counters), then the load stops (Serve
scales back to one). Every `--every` seconds the replica states, requests answered and failed are
written to `timeline.jsonl`; `summary.json` and `timeline.png` at the end.

    .venv/bin/python docs/results/serving/ray_autoscale/run.py [--out DIR] [--load-s 240]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[4]
APP = "entmtp-autoscale"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--out", type=Path, default=Path(__file__).parent, help="where the timeline and summary go")
    p.add_argument("--concurrency", type=int, default=4, help="clients of the load phase")
    p.add_argument("--idle-s", type=float, default=20, help="seconds idle before the load")
    p.add_argument("--load-s", type=float, default=240,
                   help="seconds of load after both replicas run (the phase ends at most 600 s after it began)")
    p.add_argument("--drain-s", type=float, default=300, help="at most this long waiting for one replica again")
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--every", type=float, default=2.0, help="seconds between timeline samples")
    p.add_argument("--plot-only", action="store_true", help="only redraw timeline.png from --out's timeline.jsonl")
    return p.parse_args()


def replica_states() -> dict[str, int]:
    """{state: replicas} of the LLM deployment (the one whose name is not the ingress)."""
    from ray import serve

    deployments = serve.status().applications[APP].deployments
    (llm,) = [d for name, d in deployments.items() if "Ingress" not in name]
    return dict(llm.replica_states)


def client_loop(base_url: str, stop: threading.Event, outcomes: list, max_tokens: int) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key="EMPTY", max_retries=0, timeout=300.0)
    i = 0
    while not stop.is_set():
        try:
            reply = client.chat.completions.create(
                model="entmtp", messages=[{"role": "user", "content": f"Write a short poem about the number {i}."}],
                max_tokens=max_tokens, temperature=0.0)
            outcomes.append((time.time(), "answered", reply.usage.completion_tokens))
        except Exception as exc:  # noqa: BLE001 - counted in the timeline
            outcomes.append((time.time(), "error", f"{type(exc).__name__}: {exc}"[:200]))
        i += 1


def main() -> None:
    args = parse_args()
    if args.plot_only:
        rows = [json.loads(line) for line in (args.out / "timeline.jsonl").read_text().splitlines()]
        plot(rows, args.out / "timeline.png")
        return
    import ray
    from ray import serve

    from entmtp_vllm.bench.serve import free_port
    from entmtp_vllm.bench.serve.ray_metrics import read_replicas, replica_deltas
    from entmtp_vllm.ray_serve import build_app

    args.out.mkdir(parents=True, exist_ok=True)
    metrics_dir = tempfile.mkdtemp(prefix="entmtp-autoscale-metrics-")  # each replica's Prometheus folder
    (app,) = yaml.safe_load((ROOT / "deploy/ray/serve_config.yaml").read_text())["applications"]
    autoscaling = {"min_replicas": 1, "max_replicas": 2, "target_ongoing_requests": 1,
                   "upscale_delay_s": 5, "downscale_delay_s": 30, "metrics_interval_s": 2, "look_back_period_s": 10}
    app_args = {**app["args"], "num_replicas": None, "autoscaling_config": autoscaling, "num_cpus": 1,
                "metrics_dir": str(metrics_dir)}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    timeline, outcomes, stop = [], [], threading.Event()
    t0 = time.time()
    log = (args.out / "timeline.jsonl").open("w")

    def sample(phase: str) -> dict:
        states = replica_states()
        row = {"t": round(time.time() - t0, 1), "phase": phase, **{k.lower(): v for k, v in states.items()},
               "answered": sum(o[1] == "answered" for o in outcomes), "failed": sum(o[1] == "error" for o in outcomes)}
        timeline.append(row)
        log.write(json.dumps(row) + "\n")
        log.flush()
        print(row, flush=True)
        return row

    try:
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        serve.run(build_app(app_args), name=APP, route_prefix="/")
        deployed_s = time.time() - t0
        base_url = f"http://127.0.0.1:{port}/v1"
        end = time.time() + args.idle_s
        while time.time() < end:
            sample("idle")
            time.sleep(args.every)
        clients = [threading.Thread(target=client_loop, args=(base_url, stop, outcomes, args.max_tokens), daemon=True)
                   for _ in range(args.concurrency)]
        load_began = time.time()
        for c in clients:
            c.start()
        two_at = None
        while time.time() - load_began < 600:
            row = sample("load")
            if row.get("running", 0) == 2 and two_at is None:
                two_at = time.time()
            if two_at is not None and time.time() - two_at >= args.load_s:
                break
            time.sleep(args.every)
        per_replica = replica_deltas(None, read_replicas(metrics_dir))  # each replica's drafts over the run
        stop.set()
        for c in clients:
            c.join(330)
        drain_began = time.time()
        one_at = None
        while time.time() - drain_began < args.drain_s:
            row = sample("drain")
            if row.get("running", 0) == 1 and not row.get("stopping", 0):
                one_at = time.time()
                break
            time.sleep(args.every)
        summary = {
            "autoscaling_config": autoscaling, "concurrency": args.concurrency, "max_tokens": args.max_tokens,
            "deployed_s": round(deployed_s, 1),
            "second_replica_running_after_load_began_s": None if two_at is None else round(two_at - load_began, 1),
            "back_to_one_replica_after_load_stopped_s": None if one_at is None else round(one_at - drain_began, 1),
            "answered": sum(o[1] == "answered" for o in outcomes),
            "failed": [o[2] for o in outcomes if o[1] == "error"],
            "per_replica": per_replica,
        }
        (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        print(json.dumps(summary, indent=1))
        plot(timeline, args.out / "timeline.png")
    finally:
        stop.set()
        log.close()
        try:
            serve.shutdown()
        finally:
            ray.shutdown()


def plot(timeline: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = timeline[0]["t"]  # the first sample: the app is deployed
    t = [r["t"] - t0 for r in timeline]
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.step(t, [r.get("running", 0) for r in timeline], where="post", label="running replicas")
    ax.step(t, [r.get("starting", 0) for r in timeline], where="post", label="starting", linestyle="--")
    for phase, colour in (("load", "tab:orange"), ("drain", "tab:green")):
        ts = [r["t"] - t0 for r in timeline if r["phase"] == phase]
        if ts:
            ax.axvspan(ts[0], ts[-1], color=colour, alpha=0.12, label=f"{phase} phase")
    ax.set_xlabel("seconds since the app was deployed")
    ax.set_ylabel("replicas")
    ax.set_yticks([0, 1, 2])
    ax.set_ylim(-0.1, 2.4)
    ax2 = ax.twinx()
    ax2.plot(t, [r["answered"] for r in timeline], color="tab:gray", label="requests answered")
    ax2.set_ylabel("requests answered")
    fig.legend(loc="lower center", ncol=5, fontsize=8)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
