"""EntMTP's packed CPU matrix multiply: float32 linear layers whose cost grows slowly with the
rows of a step (one weight pass for all of them), so verifying a tree costs little more than
decoding one token. See `packed_linear.py`; `hf_model.py` and `vllm_gemm.py` put it into the
reference engine's model and vLLM's CPU worker."""
