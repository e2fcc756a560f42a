"""Engine defaults that the CLI reads without importing torch or transformers."""

DTYPE_CHOICES = ("float32", "bfloat16")
"""Model precisions the reference engine supports."""

from entmtp_vllm.config import DEFAULT_BANK  # noqa: F401  (defined once, with its measurement)
