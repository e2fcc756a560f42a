"""vLLM greedy generation without speculation, run as a subprocess by the tests (`_vllm_engine.run_reference`).

    python _reference.py JOB.json OUT.json

JOB.json: {"model", "prompts", "max_tokens", "temperature"?, "seeds"?, "extra"? (more SamplingParams
fields), "per_prompt"? (one dict of more fields per prompt)}; OUT.json: the generated
token ids per prompt (greedy, or sampled with one seed per prompt).
Same engine settings as the EntMTP engines of the tests (_vllm_engine.engine_kwargs).
"""

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _vllm_engine import engine_kwargs, generate_ids, sampling_params  # noqa: E402
    from vllm import LLM

    job = json.loads(Path(sys.argv[1]).read_text())
    llm = LLM(**engine_kwargs(job["model"]))
    if os.environ.get("ENTMTP_CPU_GEMM") == "packed":  # the reference really ran on the packed kernel
        from entmtp_vllm.cpu_gemm.vllm_gemm import packed_layers

        assert packed_layers() > 0, "ENTMTP_CPU_GEMM=packed, but no layer was packed"
    params = sampling_params(job["max_tokens"], job.get("temperature", 0.0), job.get("seeds"), **job.get("extra", {}))
    if job.get("per_prompt"):
        params = []
        for fields in job["per_prompt"]:
            fields = {"max_tokens": job["max_tokens"], **fields}
            if "logit_bias" in fields:  # JSON object keys are strings
                fields["logit_bias"] = {int(k): v for k, v in fields["logit_bias"].items()}
            params.append(sampling_params(**fields))
    ids = generate_ids(llm, job["prompts"], params)
    tmp = Path(sys.argv[2] + ".tmp")
    tmp.write_text(json.dumps(ids))
    tmp.rename(sys.argv[2])


if __name__ == "__main__":
    main()
