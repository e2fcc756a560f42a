"""Building a `ReferenceEngine` from what a user names: a model, heads, trees, a policy.

The CLI (`entmtp generate`, `entmtp bench offline`) and scripts share these helpers,
so that the same flags mean the same thing everywhere.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from entmtp_vllm.bank_file import load_bank, resolve_policy, resolve_trees
from entmtp_vllm.config import CPU_GEMM
from entmtp_vllm.engine.defaults import DEFAULT_BANK, DTYPE_CHOICES
from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.policies import Policy
from entmtp_vllm.topology import TopologyBank

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
}


def parse_dtype(name: str | torch.dtype) -> torch.dtype:
    """`float32` / `bfloat16` (or `fp32` / `bf16`, or a torch dtype) -> torch dtype."""
    if isinstance(name, torch.dtype):
        if name not in DTYPES.values():
            raise EntMTPError(f"dtype {name} is not supported; use one of: {', '.join(DTYPE_CHOICES)}")
        return name
    try:
        return DTYPES[name]
    except KeyError:
        raise EntMTPError(f"unknown dtype {name!r}; use one of: {', '.join(DTYPE_CHOICES)}") from None


def load_target(
    model: str | None = None,
    dtype: str | torch.dtype = "float32",
    attn_implementation: str = "sdpa",
    cpu_gemm: str = CPU_GEMM.reference_engine,
):
    """(model, tokenizer) for `--model` (None: the embedded SmolLM2), in eval mode on CPU, its
    linear layers on the matrix multiply `cpu_gemm` names (`model.entmtp_cpu_gemm` says which ran)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from entmtp_vllm.model_store import resolve_model

    hf_logging.disable_progress_bar()

    torch_dtype = parse_dtype(dtype)
    where = resolve_model(model)
    try:
        tokenizer = AutoTokenizer.from_pretrained(where)
        lm = AutoModelForCausalLM.from_pretrained(where, dtype=torch_dtype, attn_implementation=attn_implementation)
    except OSError as exc:
        raise EntMTPError(f"cannot load model {where}: {str(exc).splitlines()[0]}") from None
    lm.entmtp_cpu_gemm = use_cpu_gemm(lm, cpu_gemm)
    return lm.eval(), tokenizer


def use_cpu_gemm(model, choice: str) -> str:
    """Put `model`'s linear layers on the matrix multiply `choice` (auto / packed / torch, see
    `CpuGemmConfig.reference_engine`); returns which one they run on."""
    from entmtp_vllm.cpu_gemm.choice import why_not_packed
    from entmtp_vllm.cpu_gemm.hf_model import use_packed_gemm

    if choice not in ("auto", "packed", "torch"):
        raise EntMTPError(f"unknown CPU matrix multiply {choice!r}; use auto, packed or torch")
    if choice == "torch":
        return "torch"
    dtype = str(model.dtype).removeprefix("torch.")
    if why_not_packed(choice == "packed", dtype, model.dtype == torch.float32):
        return "torch"
    use_packed_gemm(model)
    return "packed"


def default_heads_folder(kind: str = "hydra") -> Path:
    """Where the shipped heads of `kind` live (they may not exist yet)."""
    from entmtp_vllm.heads.checkpoint import default_heads_path

    return Path(default_heads_path(kind))


def load_drafter(heads: str | os.PathLike[str] | None, model, kind: str = "hydra", full_vocab: bool = False):
    """A `TreeDrafter` over the heads in folder `heads` (None: the shipped `kind` heads),
    checked against `model` (hidden size, vocabulary) and cast to its dtype. The heads rank
    only the folder's draft vocabulary (`draft_vocab.json`) when it has one, unless `full_vocab`.
    The heads run on the packed CPU matrix multiply when the target's linear layers do."""
    from entmtp_vllm.heads.checkpoint import load_heads
    from entmtp_vllm.heads.draft_vocab import load_draft_vocab
    from entmtp_vllm.heads.drafting import TreeDrafter

    folder = Path(heads) if heads is not None else default_heads_folder(kind)
    if not folder.exists():
        flag = "--medusa-heads" if kind == "medusa" else "--heads"
        raise EntMTPError(
            f"no {kind} heads at {folder}: pass {flag} FOLDER (a folder with heads.safetensors + config.json), "
            "or use --method ar"
        )
    param = next(model.parameters())
    loaded = load_heads(folder, model.config, dtype=param.dtype, device=param.device)
    vocab = None if full_vocab or loaded.own_lm_head else load_draft_vocab(folder, loaded.vocab_size)
    drafter = TreeDrafter(
        loaded, model.get_input_embeddings().weight, model.get_output_embeddings().weight, draft_vocab=vocab
    )
    if getattr(model, "entmtp_cpu_gemm", None) == "packed":  # the heads on the target's matrix multiply
        from entmtp_vllm.cpu_gemm.hf_model import use_packed_drafter

        use_packed_drafter(drafter)
    return drafter


def load_trees(
    tree: str | None = None,
    name: str | None = None,
    bank: str | os.PathLike[str] | None = None,
    policy: str | dict | None = None,
) -> tuple[TopologyBank, Policy, str]:
    """(bank, policy, label) from `--tree SPEC [--name N]` or `--bank FILE`, and `--policy`.

    Neither: the shipped default bank (`config.DEFAULT_BANK`). The policy defaults to the bank
    file's own policy, else static on the first tree.
    """
    if tree is not None and bank is not None:
        raise EntMTPError("give either --tree or --bank, not both")
    if tree is None and bank is None:
        bank = DEFAULT_BANK
    if bank is not None:
        bank_file = load_bank(bank)  # --bank takes bank files only
        topology = bank_file.topology_bank()
        resolved = resolve_policy(policy, topology, bank_file.policy)
        label = f"bank:{Path(bank).name}"
    else:
        topology, resolved = resolve_trees(tree, name, policy)
        label = f"tree:{tree}" + (f"#{name}" if name else "")
    return topology, resolved, label
