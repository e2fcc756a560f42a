"""Engine defaults that the CLI reads without importing torch or transformers."""

DTYPE_CHOICES = ("float32", "bfloat16")
"""Model precisions the reference engine supports."""

DEFAULT_TREE = "full:2,1,1"
"""Tree used by `entmtp generate` when neither --tree nor --bank is given: a small tree,
because on CPU verification cost grows with the node count (see docs/results/)."""
