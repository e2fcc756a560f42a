"""Tree policies: which tree of the bank to draft with at each step.

A policy reads a step's `StepFeatures` (its `path_value`, the paper's score s) and
returns a bank index. Configs name trees by bank name (str) or index (int);
`make_policy` resolves them against a bank once, so choosing is an integer
comparison per step.

- static: always the same tree.
- ladder: `edges` cut s into len(edges) + 1 bins; bin = number of edges strictly
  below s (s equal to an edge goes to the lower bin); bin k uses trees[k].
- hysteresis: starts on `conservative`; switches to `aggressive` when s > tau_on and
  back when s <= tau_off (tau_off <= tau_on); inside (tau_off, tau_on] it stays.

Ladder and hysteresis threshold `feature` (default `path_value`, the paper's s); any name
in `features.POLICY_FEATURES` may be used instead, e.g. `lookup_match` (the length of the
prompt-lookup match) to switch to a long lookup chain when the output loops, or `head_top1_1`
(head 1's top-1 probability: the drafter's own confidence, read before the tree is chosen).
"""

from __future__ import annotations

import bisect
import math
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Annotated, Literal, Protocol, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.features import POLICY_FEATURES, VERIFIER_FEATURES, StepFeatures, feature_value, heads_read


def _tree_ref(value: object) -> int | str:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"a tree is a bank name (str) or a bank index (int), got {value!r}")
    return value


TreeRef = Annotated[Union[int, str], PlainValidator(_tree_ref)]
"""A tree of the bank: its name, or its index."""

FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]

POLICY_FORMS = (
    "static:TREE, ladder:E1,...,En:T0,...,Tn (n edges, n+1 trees), "
    "hysteresis:TAU_ON[,TAU_OFF]:CONSERVATIVE,AGGRESSIVE (a tree is a bank name or an index); "
    "ladder@FEATURE:... and hysteresis@FEATURE:... threshold FEATURE instead of path_value"
)


def _known_feature(name: str) -> str:
    if name not in POLICY_FEATURES:
        raise ValueError(f"unknown feature {name!r}; known: {', '.join(POLICY_FEATURES)}")
    return name


FeatureName = Annotated[str, PlainValidator(_known_feature)]
"""A scalar step feature a policy thresholds (see `features.POLICY_FEATURES`)."""


class _PolicyModel(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid", frozen=True)


class StaticPolicyConfig(_PolicyModel):
    """Always the same tree."""

    kind: Literal["static"] = "static"
    """Policy kind."""

    tree: TreeRef
    """The tree to use at every step."""


class LadderPolicyConfig(_PolicyModel):
    """Bins the path value s by thresholds; bin k uses trees[k]."""

    kind: Literal["ladder"] = "ladder"
    """Policy kind."""

    edges: list[FiniteFloat]
    """Strictly increasing thresholds on s; s equal to an edge falls in the lower bin."""

    trees: list[TreeRef]
    """One tree per bin, lowest s first: exactly len(edges) + 1 trees."""

    feature: FeatureName = "path_value"
    """The feature s that the edges cut (default the path value)."""

    @field_validator("edges")
    @classmethod
    def _increasing(cls, edges: list[float]) -> list[float]:
        if any(b <= a for a, b in zip(edges, edges[1:])):
            raise ValueError(f"edges must be strictly increasing, got {edges}")
        return edges

    @field_validator("trees")
    @classmethod
    def _one_tree_per_bin(cls, trees: list[int | str], info: ValidationInfo) -> list[int | str]:
        edges = info.data.get("edges")
        if edges is not None and len(trees) != len(edges) + 1:
            raise ValueError(f"needs len(edges) + 1 = {len(edges) + 1} trees, got {len(trees)}")
        return trees


class HysteresisPolicyConfig(_PolicyModel):
    """Two trees with a hysteresis band on s (the paper's scheduler)."""

    kind: Literal["hysteresis"] = "hysteresis"
    """Policy kind."""

    conservative: TreeRef
    """The small tree; used first, and whenever s <= tau_off."""

    aggressive: TreeRef
    """The large tree; used once s > tau_on, until s <= tau_off."""

    tau_on: FiniteFloat
    """Switch to the aggressive tree when s > tau_on."""

    tau_off: FiniteFloat
    """Switch back when s <= tau_off; at most tau_on. When omitted (or None) it is tau_on:
    a single threshold, the paper's default."""

    feature: FeatureName = "path_value"
    """The feature s compared with the thresholds (default the path value)."""

    @model_validator(mode="before")
    @classmethod
    def _default_tau_off(cls, data: object) -> object:
        if isinstance(data, dict) and data.get("tau_off") is None and "tau_on" in data:
            return {**data, "tau_off": data["tau_on"]}
        return data

    @field_validator("tau_off")
    @classmethod
    def _band(cls, tau_off: float, info: ValidationInfo) -> float:
        tau_on = info.data.get("tau_on")
        if tau_on is not None and tau_off > tau_on:
            raise ValueError(f"tau_off ({tau_off}) must be at most tau_on ({tau_on})")
        return tau_off


PolicyConfig = Annotated[
    Union[StaticPolicyConfig, LadderPolicyConfig, HysteresisPolicyConfig],
    Field(discriminator="kind"),
]
"""Any policy config, told apart by its `kind`."""

_POLICY_ADAPTER: TypeAdapter[PolicyConfig] = TypeAdapter(PolicyConfig)


class TreeBankLike(Protocol):
    """What a policy needs from a bank (a `TopologyBank` fits)."""

    def index(self, name: str) -> int: ...

    def __len__(self) -> int: ...


@dataclass
class PolicyState:
    """One request's policy state and counters."""

    tree: int
    """Bank index of the current tree (the policy's initial tree before any choice)."""

    usage: list[int]
    """How many steps chose each bank index."""

    steps: int = 0
    """Choices made so far."""

    switches: int = 0
    """Choices that differed from the tree current at that time."""


class Policy(ABC):
    """Chooses a bank index per step; per-request state lives in a `PolicyState`."""

    def __init__(self, num_trees: int, initial: int, feature: str = "path_value") -> None:
        self.num_trees = num_trees
        self.initial = initial
        self.feature = feature

    @property
    def reads_verifier(self) -> bool:
        """Whether the choice depends on the target's p0 / entropy at the root (False: an
        engine may pass zeros for them)."""
        return self.feature in VERIFIER_FEATURES

    @property
    def heads_read(self) -> int:
        """How many heads' top-1 probabilities (head 1 first) the choice reads: an engine computes
        that greedy chain before choosing (0: it may skip it)."""
        return heads_read(self.feature)

    def new_state(self) -> PolicyState:
        """A fresh state for a new request, on the initial tree."""
        return PolicyState(tree=self.initial, usage=[0] * self.num_trees)

    def choose(self, state: PolicyState, features: StepFeatures) -> int:
        """The bank index for the next step; updates the state's tree and counters."""
        s = features.path_value if self.feature == "path_value" else feature_value(features, self.feature)
        chosen = self._next(state.tree, s)
        if chosen != state.tree:
            state.switches += 1
        state.tree = chosen
        state.steps += 1
        state.usage[chosen] += 1
        return chosen

    @abstractmethod
    def _next(self, current: int, s: float) -> int:
        """The next bank index given the current one and the score s."""


class StaticPolicy(Policy):
    """Always one tree."""

    def __init__(self, num_trees: int, tree: int) -> None:
        super().__init__(num_trees, tree)
        self.tree = tree

    @property
    def reads_verifier(self) -> bool:
        return False

    def _next(self, current: int, s: float) -> int:
        return self.tree


class LadderPolicy(Policy):
    """trees[number of edges strictly below s]; starts on the lowest bin's tree."""

    def __init__(self, num_trees: int, edges: list[float], trees: list[int], feature: str = "path_value") -> None:
        super().__init__(num_trees, trees[0], feature)
        self.edges = edges
        self.trees = trees

    def _next(self, current: int, s: float) -> int:
        return self.trees[bisect.bisect_left(self.edges, s)]


class HysteresisPolicy(Policy):
    """Conservative until s > tau_on, aggressive until s <= tau_off."""

    def __init__(
        self, num_trees: int, conservative: int, aggressive: int, tau_on: float, tau_off: float,
        feature: str = "path_value",
    ) -> None:
        super().__init__(num_trees, conservative, feature)
        self.conservative = conservative
        self.aggressive = aggressive
        self.tau_on = tau_on
        self.tau_off = tau_off

    def _next(self, current: int, s: float) -> int:
        if current == self.aggressive:
            return self.conservative if s <= self.tau_off else self.aggressive
        return self.aggressive if s > self.tau_on else self.conservative


def _validation_message(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "config"
    message = str(first["ctx"]["error"]) if first["type"] == "value_error" else first["msg"]
    return f"{where}: {message}"


def validate_policy_config(config: PolicyConfig | dict) -> PolicyConfig:
    """A policy config from a config object or a plain dict; EntMTPError names the bad field."""
    if isinstance(config, (StaticPolicyConfig, LadderPolicyConfig, HysteresisPolicyConfig)):
        return config
    try:
        return _POLICY_ADAPTER.validate_python(config)
    except ValidationError as error:
        raise EntMTPError(f"invalid policy config: {_validation_message(error)}") from None


def _resolve(ref: TreeRef, bank: TreeBankLike, field_name: str) -> int:
    """Bank index of a tree reference, or EntMTPError naming the config field."""
    if isinstance(ref, int):
        if not 0 <= ref < len(bank):
            raise EntMTPError(
                f"invalid policy config: {field_name}: tree index {ref} is out of range; "
                f"the bank has {len(bank)} trees (0..{len(bank) - 1})"
            )
        return ref
    try:
        return bank.index(ref)
    except (EntMTPError, KeyError, ValueError) as error:
        raise EntMTPError(f"invalid policy config: {field_name}: {error}") from None


def make_policy(config: PolicyConfig | dict, bank: TreeBankLike) -> Policy:
    """Validate `config` and resolve its trees against `bank` (`index(name)` and `len`)."""
    config = validate_policy_config(config)
    num_trees = len(bank)
    if isinstance(config, StaticPolicyConfig):
        return StaticPolicy(num_trees, _resolve(config.tree, bank, "static.tree"))
    if isinstance(config, LadderPolicyConfig):
        trees = [_resolve(ref, bank, f"ladder.trees.{k}") for k, ref in enumerate(config.trees)]
        return LadderPolicy(num_trees, list(config.edges), trees, config.feature)
    return HysteresisPolicy(
        num_trees,
        _resolve(config.conservative, bank, "hysteresis.conservative"),
        _resolve(config.aggressive, bank, "hysteresis.aggressive"),
        config.tau_on,
        config.tau_off,
        config.feature,
    )


_INDEX = re.compile(r"\d+")


def _parse_tree_ref(text: str) -> TreeRef:
    """A CLI tree reference: digits are a bank index, anything else a name."""
    return int(text) if _INDEX.fullmatch(text) else text


def _parse_floats(text: str, source: str) -> list[float]:
    try:
        values = [float(part) for part in text.split(",")]
    except ValueError:
        raise EntMTPError(
            f"invalid policy {source!r}: {text!r} is not a comma-separated list of numbers; "
            f"accepted forms: {POLICY_FORMS}"
        ) from None
    if not all(math.isfinite(value) for value in values):
        raise EntMTPError(f"invalid policy {source!r}: thresholds must be finite numbers, got {text!r}")
    return values


def parse_policy_arg(text: str) -> PolicyConfig:
    """A policy config from a CLI string: `static:NAME`, `ladder:0.1,0.3:t1,t2,t3`,
    `hysteresis:TAU_ON[,TAU_OFF]:CONSERVATIVE,AGGRESSIVE`; `ladder@FEATURE:...` and
    `hysteresis@FEATURE:...` threshold another feature, e.g. `hysteresis@lookup_match:2:hydra,loop`.

    A tree given as digits is a bank index, otherwise a bank name.
    """
    kind, _, rest = text.strip().partition(":")
    kind, at, feature = kind.partition("@")
    parts = rest.split(":")
    bad_form = EntMTPError(f"invalid policy {text!r}; accepted forms: {POLICY_FORMS}")
    if not rest or any(not part for part in parts) or (at and (kind == "static" or not feature)):
        raise bad_form
    if kind == "static" and len(parts) == 1:
        config: dict = {"kind": "static", "tree": _parse_tree_ref(parts[0])}
    elif kind == "ladder" and len(parts) == 2:
        config = {
            "kind": "ladder",
            "edges": _parse_floats(parts[0], text),
            "trees": [_parse_tree_ref(name) for name in parts[1].split(",")],
        }
    elif kind == "hysteresis" and len(parts) == 2:
        taus = _parse_floats(parts[0], text)
        names = parts[1].split(",")
        if len(taus) not in (1, 2) or len(names) != 2:
            raise bad_form
        config = {
            "kind": "hysteresis",
            "tau_on": taus[0],
            "tau_off": taus[-1],
            "conservative": _parse_tree_ref(names[0]),
            "aggressive": _parse_tree_ref(names[1]),
        }
    else:
        raise bad_form
    if feature:
        config["feature"] = feature
    return validate_policy_config(config)
