"""Engine defaults that the CLI reads without importing torch or transformers."""

DTYPE_CHOICES = ("float32", "bfloat16")
"""Model precisions the reference engine supports."""

DEFAULT_TREE = "chain:1"
"""Tree used by `entmtp generate` when neither --tree nor --bank is given. Measured best of
chain:1..3, full:2,1, full:3,1 and full:2,1,1 with the shipped Hydra heads, SmolLM2 in
bf16 on one CPU thread (docs/results/c1_small_tree_sweep_bf16): on CPU each head call costs a
full-vocabulary LM-head projection (~15-20% of a forward pass), so deeper drafts cost more
than the extra accepted tokens bring."""
