"""Acceptance rules: which drafted path the target keeps, and the bonus token after it.

Every rule reads one step of one request:

- `buffers`: the tree's `TreeBuffers` (node 0 is the root);
- `draft_tokens` long[N]: the token of each node; node 0 is the root, the last
  emitted token (not yet in the KV cache);
- `logits` float[N, V]: row i is the target's distribution of the token that
  follows the path root -> i.

and returns an `AcceptResult`: the accepted node indices (root first, always
present) and the bonus token sampled or taken at the last accepted node.

- `accept_greedy`: the longest path whose drafts all equal the target's argmax.
- `accept_typical`: Medusa/Hydra typical acceptance (lossy at T > 0).
- `accept_lossless`: recursive rejection sampling over siblings (SpecInfer,
  EAGLE); the emitted tokens follow the target's processed distribution exactly.
- `TokenWalk` / `accept_drawn`: draft-independent verification (the vLLM path's sampled
  requests): the target's token is drawn at each node as without speculation and the walk
  follows the child that drafted it; lossless, and a seeded request's text does not depend on
  the drafts.

At temperature 0 all three are the same rule (`accept_greedy`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import torch

from entmtp_vllm.config import SamplingParams, TypicalConfig
from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.sampling import greedy_tokens, processed_probs, sample
from entmtp_vllm.topology import TreeBuffers

AcceptMode = Literal["greedy", "typical", "lossless"]
ACCEPT_MODES: tuple[str, ...] = get_args(AcceptMode)

# Medusa computes the entropy in the typical criterion as -sum p * log(p + 1e-5);
# the same offset is kept so that thresholds match the reference implementation.
MEDUSA_ENTROPY_EPS = 1e-5


@dataclass(frozen=True)
class AcceptResult:
    """Outcome of one verification step."""

    accepted: list[int]
    """Node indices of the accepted path, root first (the root is always accepted)."""

    bonus_token: int
    """Token drawn (or taken as argmax) from the target at the last accepted node."""

    @property
    def accept_length(self) -> int:
        """Tokens emitted this step: the accepted drafts plus the bonus token."""
        return len(self.accepted)

    def emitted(self, draft_tokens: torch.Tensor | Sequence[int]) -> list[int]:
        """The tokens this step appends to the output: accepted drafts, then the bonus."""
        return [int(draft_tokens[i]) for i in self.accepted[1:]] + [self.bonus_token]


def _check_inputs(buffers: TreeBuffers, draft_tokens: torch.Tensor, logits: torch.Tensor) -> None:
    n = buffers.num_nodes
    if draft_tokens.shape != (n,):
        raise ValueError(f"draft_tokens must have shape ({n},), got {tuple(draft_tokens.shape)}")
    if logits.dim() != 2 or logits.shape[0] != n:
        raise ValueError(f"logits must have shape ({n}, V), got {tuple(logits.shape)}")


def _accepted_drafts(buffers: TreeBuffers, node_ok: torch.Tensor) -> torch.Tensor:
    """Per retrieve row, how many drafts in a row from the root are acceptable.

    `node_ok[i]` says whether node i's draft passes the criterion against its parent's row
    (the root's entry is never read). Padding (-1) never counts.
    """
    path = buffers.retrieve_indices[:, 1:]
    ok = node_ok[path.clamp(min=0)] & (path >= 0)
    return ok.long().cumprod(dim=1).sum(dim=1)


def _path(buffers: TreeBuffers, row: int, drafts: int) -> list[int]:
    """The root followed by the first `drafts` nodes of retrieve row `row`."""
    return buffers.retrieve_indices[row, : drafts + 1].tolist()


def longest_path(buffers: TreeBuffers, node_ok: torch.Tensor | Sequence[bool]) -> list[int]:
    """The accepted path (root first) given which nodes pass their criterion: the longest run
    from the root over the retrieve rows, ties to the first row (the rule every mode shares).
    Walked in Python over the tree's host rows (`node_ok` a tensor is read once)."""
    ok = node_ok.tolist() if isinstance(node_ok, torch.Tensor) else node_ok
    best, length = buffers.retrieve_rows[0], -1
    for row in buffers.retrieve_rows:
        n = 0
        while n + 1 < len(row) and ok[row[n + 1]]:
            n += 1
        if n > length:
            best, length = row, n
    return list(best[: length + 1])


def accept_greedy(
    buffers: TreeBuffers, draft_tokens: torch.Tensor, logits: torch.Tensor, target: torch.Tensor | None = None
) -> AcceptResult:
    """Longest root-to-node path whose every draft equals the argmax of its parent's row.

    Candidates are the retrieve rows, so duplicated sibling tokens are each followed into
    their own subtree; the longest match wins and ties go to the first row. The bonus is
    the argmax at the last accepted node (ties to the lowest token id). `target`: the rows'
    argmax when the caller already has it (one argmax over a whole batch's rows).
    """
    _check_inputs(buffers, draft_tokens, logits)
    if target is None:
        target = greedy_tokens(logits)
    node_ok = draft_tokens == target[buffers.parents.clamp(min=0)]
    accepted = longest_path(buffers, node_ok)
    return AcceptResult(accepted, int(target[accepted[-1]]))


@dataclass
class GreedyStep:
    """A step's greedy verification, read back to the host: `targets[r]` is row r's argmax;
    `node_ok[k][j]` says whether node j of the k-th tree drafted its parent row's argmax (the
    root's entry is False and never read)."""

    targets: list[int]
    node_ok: list[list[bool]]


def greedy_step(
    logits: torch.Tensor, trees: Sequence[tuple[int, TreeBuffers, Sequence[int]]], on_device: bool | None = None
) -> GreedyStep:
    """Every row's argmax and, for each tree (its first row in `logits`, its buffers, its node
    tokens), which draft nodes match their parent row's argmax. `on_device` (None: unless the
    logits are on the CPU): the matches are computed where the logits are and read back with the
    argmaxes in one tensor (on a GPU, the one host sync greedy verification adds); else the
    argmaxes are read back and compared in Python (on a CPU, cheaper than the small tensors)."""
    targets = greedy_tokens(logits)
    if on_device is None:
        on_device = targets.device.type != "cpu"
    rows = targets.shape[0]
    if not on_device:
        values = targets.tolist()
        node_ok = []
        for first, buffers, tokens in trees:
            parents = buffers.parent_list
            node_ok.append([False] + [tokens[j] == values[first + parents[j]] for j in range(1, len(parents))])
        return GreedyStep(values, node_ok)
    parent_rows: list[int] = []
    drafted: list[int] = []
    for first, buffers, tokens in trees:
        parents = buffers.parent_list
        parent_rows.extend(first + parents[j] for j in range(1, len(parents)))
        drafted.extend(int(tokens[j]) for j in range(1, len(parents)))
    if parent_rows:
        device = targets.device
        matches = targets[torch.tensor(parent_rows, device=device)] == torch.tensor(drafted, device=device)
        values = torch.cat([targets, matches.to(targets.dtype)]).tolist()
    else:
        values = targets.tolist()
    node_ok, start = [], rows
    for _, buffers, _ in trees:
        count = buffers.num_nodes - 1
        node_ok.append([False] + [bool(v) for v in values[start : start + count]])
        start += count
    return GreedyStep(values[:rows], node_ok)


def accept_greedy_host(buffers: TreeBuffers, node_ok: Sequence[bool], target: Sequence[int]) -> AcceptResult:
    """`accept_greedy` from a `GreedyStep`: `node_ok` (one per node) and `target` (the tree's
    rows' argmax) on the host; the same path and bonus, walked in Python over the tree's host
    lists instead of a handful of small tensor ops per request."""
    accepted = longest_path(buffers, node_ok)
    return AcceptResult(accepted, int(target[accepted[-1]]))


def accept_typical(
    buffers: TreeBuffers,
    draft_tokens: torch.Tensor,
    logits: torch.Tensor,
    params: SamplingParams,
    typical: TypicalConfig = TypicalConfig(),
    generator: torch.Generator | None = None,
) -> AcceptResult:
    """Medusa/Hydra typical acceptance; `accept_greedy` at temperature 0.

    With p = softmax(logits / T) (temperature only, as in Medusa) a node's draft t is
    acceptable when p_parent(t) > min(epsilon, alpha * exp(-H(p_parent))), where
    H = -sum p log(p + 1e-5) as Medusa computes it. A candidate (retrieve row) keeps its
    drafts up to the first unacceptable one; the longest wins. Among equally long
    candidates Medusa keeps the one with the largest sum of log p over the accepted
    drafts; exact ties go to the first row. The bonus token is sampled from
    `processed_probs(logits[last accepted], params)`, where top-k and top-p apply.
    """
    if params.greedy:
        return accept_greedy(buffers, draft_tokens, logits)
    _check_inputs(buffers, draft_tokens, logits)
    probs = (logits.float() / params.temperature).softmax(dim=-1)
    entropy = -(probs * torch.log(probs + MEDUSA_ENTROPY_EPS)).sum(dim=-1)
    threshold = (typical.alpha * torch.exp(-entropy)).clamp(max=typical.epsilon)
    parents = buffers.parents.clamp(min=0)
    draft_prob = probs[parents, draft_tokens]
    lengths = _accepted_drafts(buffers, draft_prob > threshold[parents])

    longest = int(lengths.max())
    best = 0
    if longest > 0:
        path = buffers.retrieve_indices[:, 1 : longest + 1].clamp(min=0)
        likelihood = draft_prob.log()[path].sum(dim=1)
        likelihood = likelihood.masked_fill(lengths != longest, float("-inf"))
        best = int(likelihood.argmax())
    accepted = _path(buffers, best, longest)
    bonus = sample(processed_probs(logits[accepted[-1]], params), generator)
    return AcceptResult(accepted, bonus)


def _residual(p: torch.Tensor, token: int, q: torch.Tensor | None) -> torch.Tensor:
    """normalise(max(0, p - q)) after the draft `token` (drawn from q) was rejected.

    q None is the one-hot on `token`. In exact arithmetic the residual mass is the
    probability that a rejection happens at all, so an all-zero residual (p == q) means
    this call cannot occur; with rounding it can, rarely. Then p is kept unchanged: the
    output stays inside the target's support and is off by at most the rounding error.
    """
    if q is None:
        residual = p.clone()
        residual[token] = 0.0
    else:
        residual = (p - q).clamp(min=0.0)
    mass = residual.sum()
    if not bool(mass > 0):
        return p
    return residual / mass


def accept_lossless(
    buffers: TreeBuffers,
    draft_tokens: torch.Tensor,
    logits: torch.Tensor,
    params: SamplingParams,
    generator: torch.Generator | None = None,
    draft_probs: torch.Tensor | None = None,
) -> AcceptResult:
    """Recursive rejection sampling over siblings; `accept_greedy` at temperature 0.

    At the current node p = processed_probs(row). Each child, in rank order, with token t
    drawn from q is accepted with probability min(1, p(t) / q(t)); on acceptance the walk
    moves to the child and starts over with its row. On rejection p becomes
    normalise(max(0, p - q)) and the next sibling is tried. When every child is rejected,
    or the node is a leaf, the bonus token is sampled from the current p.

    `draft_probs` float[N, V]: row c is the distribution node c's token was sampled from,
    given everything drafted before it (for siblings drawn without replacement, the
    renormalised remainder). None means deterministic top-k drafting: q is the one-hot on
    the drafted token, so acceptance has probability p(t) and rejection zeroes p(t).
    The emitted tokens then follow the target's processed distribution exactly, at any
    temperature, top-k and top-p. A duplicated sibling token is handled by the same rule:
    under one-hot q, once rejected its p is 0 and later copies are rejected too.
    """
    if params.greedy:
        return accept_greedy(buffers, draft_tokens, logits)
    _check_inputs(buffers, draft_tokens, logits)
    if draft_probs is not None and draft_probs.shape != logits.shape:
        raise ValueError(
            f"draft_probs must have the shape of logits {tuple(logits.shape)}, got {tuple(draft_probs.shape)}"
        )
    tokens = draft_tokens.tolist()
    # Each child is tried at most once, so one uniform per node is all the walk needs.
    device = generator.device if generator is not None else torch.device("cpu")
    uniforms = torch.rand(buffers.num_nodes, generator=generator, device=device).tolist()
    accepted = [0]
    p = processed_probs(logits[0], params)
    while True:
        child = None
        for candidate in buffers.children[accepted[-1]]:
            token = tokens[candidate]
            q = None if draft_probs is None else draft_probs[candidate]
            q_token = 1.0 if q is None else float(q[token])
            if q_token <= 0.0:
                raise ValueError(f"node {candidate}: draft token {token} has probability 0 under its draft_probs row")
            # u < p(t) / q(t), written without the division.
            if uniforms[candidate] * q_token < float(p[token]):
                child = candidate
                break
            p = _residual(p, token, q)
        if child is None:
            return AcceptResult(accepted, sample(p, generator))
        accepted.append(child)
        p = processed_probs(logits[child], params)


class TokenWalk:
    """Draft-independent verification of one request's tree, one node at a time: at the node the
    walk stands on (`node`), the caller draws the target's token from that node's processed
    distribution exactly as it would without speculation (one draw per emitted token, from the
    request's own randomness); `visit(token)` moves to the first child, in rank order, that
    drafted that token, or ends the step with it as the bonus (`result`).

    Every emitted token is a draw of the target's distribution given the tokens before it, so the
    rule is lossless, and the emitted text depends only on the draws, never on the tree: a seeded
    request gives the same text as decoding without speculation. With point-mass drafts (top-k,
    lookup copies) a child is accepted with probability p(its token), as under rejection sampling
    over one-hot drafts (`accept_lossless`): the same acceptance, without the draft-dependent
    uniforms and residual draws."""

    def __init__(self, buffers: TreeBuffers, draft_tokens: Sequence[int]) -> None:
        self.buffers = buffers
        self.tokens = [int(t) for t in draft_tokens]
        self.accepted = [0]
        self.result: AcceptResult | None = None
        """Set when the walk is done: the accepted path and the bonus token."""

    @property
    def node(self) -> int:
        """The node whose processed row the next token is drawn from (the last accepted one)."""
        return self.accepted[-1]

    def visit(self, token: int) -> bool:
        """`token`, drawn at `node`: True when a child drafted it (the walk moved there and needs
        that child's draw next); False when none did (done: `result` is set, `token` its bonus)."""
        for child in self.buffers.children[self.node]:
            if self.tokens[child] == token:
                self.accepted.append(child)
                return True
        self.result = AcceptResult(self.accepted, int(token))
        return False


def accept_drawn(
    buffers: TreeBuffers, draft_tokens: Sequence[int], draw: Callable[[int], int]
) -> AcceptResult:
    """A `TokenWalk` run to the end, `draw(node)` giving the token drawn at each node it stands on."""
    walk = TokenWalk(buffers, draft_tokens)
    while walk.visit(draw(walk.node)):
        pass
    assert walk.result is not None
    return walk.result


def accept(
    mode: AcceptMode,
    buffers: TreeBuffers,
    draft_tokens: torch.Tensor,
    logits: torch.Tensor,
    params: SamplingParams = SamplingParams(),
    typical: TypicalConfig = TypicalConfig(),
    generator: torch.Generator | None = None,
    draft_probs: torch.Tensor | None = None,
) -> AcceptResult:
    """Run the acceptance rule `mode` ("greedy", "typical" or "lossless").

    `typical` is read by the typical rule only, `draft_probs` by the lossless rule only.
    """
    if mode == "greedy":
        return accept_greedy(buffers, draft_tokens, logits)
    if mode == "typical":
        return accept_typical(buffers, draft_tokens, logits, params, typical, generator)
    if mode == "lossless":
        return accept_lossless(buffers, draft_tokens, logits, params, generator, draft_probs)
    raise EntMTPError(f"unknown acceptance mode {mode!r}; use one of: {', '.join(ACCEPT_MODES)}")
