"""Online benchmark: load-test an OpenAI-compatible server, level by level of concurrency.

`run_serve_bench(config)` sends streaming requests (chat completions by default) built from
prompt sets, with `concurrency` requests in flight at a time, once per concurrency level. Each
prompt is sent once per level, or, with `duration`, prompts are sent cyclically until that many
seconds have passed (soak tests). Per level it reports, from client-side timings:

- TTFT: send → first streamed token text (or the end, when the answer has no text); ITL: gaps between streamed chunks that carry text;
  TPOT per request: (latency − TTFT) / (output tokens − 1); mean / p50 / p90 / p99 in ms;
- output tok/s (output tokens / wall time of the level), requests/s, completed and failed counts
  (a failed request never stops the run; the first few error messages are kept);
- output tokens come from the server's `usage` (`stream_options.include_usage`); a server that
  does not send it falls back to counting streamed chunks (with speculative decoding a chunk can
  carry several tokens, so that undercounts);
- when `<server>/metrics` exposes them (or, for a Ray Serve endpoint, `metrics_from: ray:<dir>`:
  every replica's counters summed, each replica's own listed too), the speculative-decoding
  counters over the level:
  vLLM's `vllm:spec_decode_num_drafts` / `_num_draft_tokens` / `_num_accepted_tokens`
  (mean acceptance length = 1 + accepted / drafts) and every `entmtp_` series (counter deltas,
  gauge values at the end; tree usage by tree name).

`run_compare(config)` starts servers itself, one after another (vLLM without speculation, vLLM's
`ngram`, EntMTP through `entmtp serve`'s command builder, and any EntMTP variants: the same server
with other settings), runs every level against each and reports throughput and TPOT ratios
against the run without speculation.

Results are JSON-ready dicts; `write_report` / `write_compare_report` write JSON, Markdown and a
PNG plot.

One module per concern; the public names (and `_entmtp_command`, which the tests use) are
re-exported here, so that `from entmtp_vllm.bench.serve import X` keeps working:

- `config`: the settings (`ServeBenchConfig`, `CompareConfig`) and their one-line errors;
- `client`: streaming requests, concurrency levels, `run_serve_bench`;
- `statistics`: request records, level summaries, a comparison's ratios and rounds;
- `prometheus`: `/metrics` parsed, the speculative-decoding numbers of a level;
- `ray_metrics`: a Ray Serve app's replica counters read and summed (`metrics_from: ray:<dir>`);
- `report`: Markdown tables, the plot, the JSON / Markdown / PNG files;
- `servers`: each method's server command line, the server subprocess, a method's server
  started and healthy (`start_server`), the rounds' server order (`round_order`);
- `compare`: `run_compare`, every server started and measured, round by round;
- `interleave`: every server up at once, measured in turns;
- `interrupt`: SIGTERM / SIGHUP stop a comparison like Ctrl-C (its servers stopped).
"""

from entmtp_vllm.bench.serve.client import (
    fetch_metrics,
    level_acceptance,
    level_metrics,
    list_models,
    load_prompt_texts,
    metrics_url,
    run_level,
    run_serve_bench,
    server_root,
    stream_request,
)
from entmtp_vllm.bench.serve.compare import run_compare
from entmtp_vllm.bench.serve.config import (
    BASELINE,
    COMPARE_METHODS,
    DEFAULT_BASE_URL,
    DEFAULT_CONCURRENCY,
    METRICS_FROM_SERVER,
    RAY_METRICS_PREFIX,
    VARIANT_PREFIX,
    CompareConfig,
    ServeBenchConfig,
    make_config,
    parse_int_list,
)
from entmtp_vllm.bench.serve.prometheus import (
    ENTMTP_PREFIX,
    ENTMTP_SPEC_SERIES,
    PER_POSITION_SERIES,
    SPEC_SERIES,
    Labels,
    MetricsSnapshot,
    acceptance_delta,
    overhead_summary,
    parse_prometheus,
)
from entmtp_vllm.bench.serve.ray_metrics import REPLICA_LABEL, read_replicas, replica_deltas, sum_replicas
from entmtp_vllm.bench.serve.report import compare_markdown, markdown_report, write_compare_report, write_report
from entmtp_vllm.bench.serve.servers import (
    MethodServer,
    ServerProcess,
    _entmtp_command,
    entmtp_commands,
    free_port,
    log_tail,
    round_order,
    server_commands,
    start_server,
)
from entmtp_vllm.bench.serve.statistics import (
    MAX_ERROR_MESSAGES,
    PERCENTILES,
    RequestResult,
    compare_table,
    median_runs,
    percentile,
    round_ratios,
    summarize_level,
    summarize_ms,
)

__all__ = [
    "BASELINE",
    "COMPARE_METHODS",
    "VARIANT_PREFIX",
    "DEFAULT_BASE_URL",
    "DEFAULT_CONCURRENCY",
    "ENTMTP_PREFIX",
    "ENTMTP_SPEC_SERIES",
    "METRICS_FROM_SERVER",
    "RAY_METRICS_PREFIX",
    "REPLICA_LABEL",
    "MAX_ERROR_MESSAGES",
    "PERCENTILES",
    "PER_POSITION_SERIES",
    "SPEC_SERIES",
    "CompareConfig",
    "Labels",
    "MetricsSnapshot",
    "RequestResult",
    "ServeBenchConfig",
    "MethodServer",
    "ServerProcess",
    "_entmtp_command",
    "acceptance_delta",
    "overhead_summary",
    "compare_markdown",
    "compare_table",
    "fetch_metrics",
    "free_port",
    "level_acceptance",
    "level_metrics",
    "list_models",
    "load_prompt_texts",
    "log_tail",
    "make_config",
    "markdown_report",
    "median_runs",
    "metrics_url",
    "parse_int_list",
    "parse_prometheus",
    "percentile",
    "read_replicas",
    "replica_deltas",
    "round_order",
    "round_ratios",
    "run_compare",
    "run_level",
    "run_serve_bench",
    "server_commands",
    "entmtp_commands",
    "server_root",
    "start_server",
    "stream_request",
    "summarize_level",
    "sum_replicas",
    "summarize_ms",
    "write_compare_report",
    "write_report",
]
