"""EntMTP's CPU attention for the requests that verify drafts: one pass over a request's K and V
for all its rows, tree masks included. See `rows.py` (build, load, call) and
`entmtp_vllm/vllm_plugin/cpu/rows.py` (which requests of a vLLM step take it)."""
