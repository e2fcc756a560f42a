"""A training run that starts from saved heads (`train-heads --init-heads`) instead of fresh weights."""

from __future__ import annotations

from pathlib import Path

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.heads import DraftHeads
from entmtp_vllm.heads.checkpoint import load_heads


def init_from(heads: DraftHeads, folder: Path, kind: str, num_layers: int, base_config, log=print) -> None:
    """Copy the weights of the heads saved in `folder` into `heads` (the run's fresh heads of `kind`
    with `num_layers` layers): the same shape, or an `EntMTPError` naming what differs. Heads without
    a prefix layer may start a Hydra++ run: its prefix layer stays fresh, the identity until trained,
    so the run's first step drafts exactly as the saved heads do."""
    saved = load_heads(folder, base_config)
    fresh_prefix = heads.prefix is not None and saved.prefix is None
    want = {"kind": kind, "heads": heads.num_heads, "layers": num_layers, "prefix layer": heads.prefix is not None}
    have = {"kind": saved.meta.get("kind"), "heads": saved.num_heads, "layers": saved.meta.get("num_layers"),
            "prefix layer": saved.prefix is not None or fresh_prefix}
    if want != have:
        differ = ", ".join(f"{k} {have[k]} (this run: {want[k]})" for k in want if want[k] != have[k])
        raise EntMTPError(f"--init-heads {folder} has {differ}: pass heads of this run's shape")
    if saved.prefix is not None and saved.prefix.config != heads.prefix.config:
        raise EntMTPError(f"--init-heads {folder} has a prefix layer of {saved.prefix.config} but this run trains one of "
                          f"{heads.prefix.config}: pass heads trained with the same prefix layer")
    missing, unexpected = heads.load_state_dict(saved.state_dict(), strict=False)
    assert not unexpected and all(name.startswith("prefix.") for name in missing), (missing, unexpected)
    log(f"initialised from the heads in {folder}" + (" (the prefix layer starts fresh: the identity)" if fresh_prefix else ""))
