"""A tiny token policy and a task with a verifiable reward, for `gyre-contract demo --llm`.

Numpy only, nothing downloaded. The task: the prompt is `a+b=` for two digits a, b; the answer
is the sum's digits then end-of-sequence (`7<eos>`, `12<eos>`), at most `MAX_NEW_TOKENS`
generated tokens. The reward is 1 for the exact answer, else partial credit (half the fraction
of the answer's tokens right at their position), so a fresh policy earns a little and learning
shows from the first cycles.

The policy is a softmax over the generation vocabulary (end-of-sequence, `+`, `=`, the digits)
whose logits at response position t are a sum of learned rows, one per context feature: the
pair (a, b) at t, a at t, b at t, t alone, and the previous token at t. Its gradients are
analytic. Its loss is GRPO's: the PPO-clip surrogate on per-token ratios π/π_old, plus β times
the k3 estimate of KL(π‖π_ref), averaged over every response token of the batch ("token-mean");
one `train_step` is one Adam update and advances `version` by one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

VOCAB = ("<pad>", "<bos>", "<eos>", "+", "=", *"0123456789")
"""Token id → text. Id 0 pads; a prompt starts with `<bos>`; a generation ends with `<eos>`."""
PAD, BOS, EOS, PLUS, EQUALS, ZERO = 0, 1, 2, 3, 4, 5
GENERATED = np.arange(EOS, len(VOCAB))
"""The ids a policy may generate (column k of its logits is token `GENERATED[k]`)."""
MAX_NEW_TOKENS = 3
PROMPT_LENGTH = 5

# Feature rows of the weight table: pair (a, b) x position, a x position, b x position,
# position, previous token x position.
_T = MAX_NEW_TOKENS
_PAIR, _A, _B, _POS, _PREV = 0, 100 * _T, 110 * _T, 120 * _T, 120 * _T + _T
N_FEATURES = _PREV + len(VOCAB) * _T


def encode(text: str) -> list[int]:
    """Token ids of `text` made of digits, `+` and `=` (one token per character)."""
    try:
        return [VOCAB.index(ch) for ch in text]
    except ValueError:
        raise ValueError(f"cannot encode {text!r}: the vocabulary is digits, '+' and '='") \
            from None


def decode(ids: Any) -> str:
    """Text of token ids; `<eos>` and padding are dropped, other specials kept by name."""
    return "".join(VOCAB[i] for i in np.asarray(ids, dtype=np.int64).tolist()
                   if i not in (PAD, EOS))


@dataclass(frozen=True)
class AdditionTask:
    """Prompts `a+b=`, answers `str(a+b)` then `<eos>`; reward 1 when exact.

    With `partial_credit`, a wrong answer earns 0.5 x the fraction of the answer's tokens
    (end-of-sequence included) that it has right at their position.
    """

    partial_credit: bool = True

    def prompt(self, a: int, b: int) -> list[int]:
        return [BOS, *encode(f"{a}+{b}=")]

    def answer(self, a: int, b: int) -> list[int]:
        return [*encode(str(a + b)), EOS]

    def reward(self, a: int, b: int, tokens: Any) -> float:
        got = np.asarray(tokens, dtype=np.int64).tolist()
        want = self.answer(a, b)
        if got == want:
            return 1.0
        if not self.partial_credit:
            return 0.0
        right = sum(1 for i, t in enumerate(want) if i < len(got) and got[i] == t)
        return 0.5 * right / len(want)

    @staticmethod
    def problems() -> list[tuple[int, int]]:
        """Every (a, b) of the task: the 100 pairs of digits."""
        return [(a, b) for a in range(10) for b in range(10)]


def operands(prompts: Any) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) of each row of left-padded prompt ids `[B, P]` ending in `a + b =`.

    Raises ValueError when a row does not end that way (a right-padded prompt, say).
    """
    ids = np.asarray(prompts)
    if ids.ndim != 2 or ids.shape[1] < 4:
        raise ValueError(f"prompts must be [B, P] with P >= 4, got shape {list(ids.shape)}")
    a, plus, b, equals = (ids[:, k] for k in (-4, -3, -2, -1))
    digit = (ZERO <= a) & (a < ZERO + 10) & (ZERO <= b) & (b < ZERO + 10)
    bad = np.flatnonzero(~digit | (plus != PLUS) | (equals != EQUALS))
    if len(bad):
        row = int(bad[0])
        raise ValueError(f"{len(bad)} prompt rows do not end in 'a+b=' (row {row}: "
                         f"{ids[row].tolist()}); prompts must be left-padded")
    return (a - ZERO).astype(np.int64), (b - ZERO).astype(np.int64)


def _features(a: np.ndarray, b: np.ndarray, t: np.ndarray, prev: np.ndarray) -> np.ndarray:
    """Feature rows `[..., 5]` of each (a, b, position, previous token)."""
    parts = np.broadcast_arrays(_PAIR + (a * 10 + b) * _T + t, _A + a * _T + t,
                                _B + b * _T + t, _POS + t + 0 * a, _PREV + prev * _T + t)
    return np.stack(parts, axis=-1)


def _log_softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


@dataclass
class Completions:
    """Sampled completions of N prompts: ragged token ids and their log-probs."""

    tokens: list[np.ndarray]
    logprob: list[np.ndarray]

    def __len__(self) -> int:
        return len(self.tokens)


GRPO_KEYS = {"prompt": "prompts", "response": "responses", "mask": "response_mask",
             "old_logprob": "old_log_probs", "ref_logprob": "ref_log_prob",
             "advantage": "advantages"}
"""Where `TokenPolicy.loss`/`train_step` find each input in a batch: verl's key names."""


@dataclass
class TokenPolicy:
    """The softmax token policy; `version` counts its updates (the contract's policy_version).

    `clip` is PPO's ε, `beta` the weight of the KL penalty against `reference` (a frozen
    copy of the initial weights, made at construction unless given).
    """

    seed: int
    lr: float = 0.1
    clip: float = 0.2
    beta: float = 0.04
    init_scale: float = 0.01
    keys: Mapping[str, str] = field(default_factory=lambda: dict(GRPO_KEYS))
    version: int = 0
    weights: np.ndarray = field(init=False, repr=False)
    reference: np.ndarray = field(init=False, repr=False)
    _moments: tuple[np.ndarray, np.ndarray] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        rng = np.random.default_rng([self.seed, 0x70C])
        self.weights = rng.normal(0.0, self.init_scale, (N_FEATURES, len(GENERATED)))
        self.reference = self.weights.copy()
        self._moments = (np.zeros_like(self.weights), np.zeros_like(self.weights))

    # -- the sampler's side ------------------------------------------------------------------

    def snapshot(self) -> tuple[int, np.ndarray]:
        """(version, a copy of the weights): what a sampler one version behind holds."""
        return self.version, self.weights.copy()

    def sample(self, a: Any, b: Any, rng: np.random.Generator,
               weights: np.ndarray | None = None) -> Completions:
        """One completion per (a, b): tokens until `<eos>` or `MAX_NEW_TOKENS`, with log-probs."""
        w = self.weights if weights is None else weights
        a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
        n = len(a)
        tokens = np.zeros((n, _T), np.int64)
        logprob = np.zeros((n, _T), np.float64)
        alive = np.ones(n, bool)
        lengths = np.zeros(n, np.int64)
        prev = np.full(n, EQUALS)
        for t in range(_T):
            logp = _log_softmax(w[_features(a, b, np.int64(t), prev)].sum(axis=-2))
            cdf = np.exp(logp).cumsum(axis=-1)
            pick = np.minimum((cdf < rng.random(n)[:, None] * cdf[:, -1:]).sum(axis=-1),
                              len(GENERATED) - 1)
            token = GENERATED[pick]
            tokens[:, t] = token
            logprob[:, t] = logp[np.arange(n), pick]
            lengths += alive
            prev = token
            alive &= token != EOS
        return Completions([tokens[i, :lengths[i]] for i in range(n)],
                           [logprob[i, :lengths[i]].astype(np.float32) for i in range(n)])

    def token_logprobs(self, a: Any, b: Any, responses: Any,
                       weights: np.ndarray | None = None) -> np.ndarray:
        """log π(token) of each position of right-padded responses `[B, R]` (padding included:
        mask it). `weights` default to the current ones; `self.reference` gives the reference's."""
        return self._forward(a, b, responses, self.weights if weights is None else weights)[0]

    def greedy_accuracy(self, task: AdditionTask, weights: np.ndarray | None = None) -> float:
        """Fraction of the task's 100 problems answered exactly by the most likely tokens."""
        w = self.weights if weights is None else weights
        pairs = np.asarray(task.problems())
        a, b = pairs[:, 0], pairs[:, 1]
        prev = np.full(len(a), EQUALS)
        out = np.zeros((len(a), _T), np.int64)
        for t in range(_T):
            prev = GENERATED[w[_features(a, b, np.int64(t), prev)].sum(axis=-2).argmax(-1)]
            out[:, t] = prev
        right = [_until_eos(row) == task.answer(x, y) for row, x, y in zip(out, a, b, strict=True)]
        return float(np.mean(right))

    # -- the trainer's side ------------------------------------------------------------------

    def loss(self, batch: Mapping[str, Any]) -> float:
        """The GRPO loss of the current weights on a batch (no update)."""
        return self._loss_and_grad(batch, grad=False)[0]

    def train_step(self, batch: Mapping[str, Any]) -> dict[str, float]:
        """One Adam update on the GRPO loss; returns the loss, KL, clip fraction and version."""
        loss, grad, stats = self._loss_and_grad(batch, grad=True)
        m, v = self._moments
        m *= 0.9
        m += 0.1 * grad
        v *= 0.999
        v += 0.001 * grad**2
        step = self.version + 1
        m_hat, v_hat = m / (1 - 0.9**step), v / (1 - 0.999**step)
        self.weights -= self.lr * m_hat / (np.sqrt(v_hat) + 1e-8)
        self.version = step
        return {"loss": loss, **stats, "policy_version": self.version}

    def _forward(self, a: Any, b: Any, responses: Any, weights: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        ids = np.asarray(responses, dtype=np.int64)
        a, b = np.asarray(a)[:, None], np.asarray(b)[:, None]
        if ids.shape[1] > _T:
            raise ValueError(f"responses have {ids.shape[1]} positions; the policy generates "
                             f"at most {_T}")
        prev = np.concatenate([np.full((len(ids), 1), EQUALS), ids[:, :-1]], axis=1)
        t = np.broadcast_to(np.arange(ids.shape[1]), ids.shape)
        feats = _features(a, b, t, prev)
        logp = _log_softmax(weights[feats].sum(axis=-2))
        column = np.clip(ids - EOS, 0, len(GENERATED) - 1)  # padding: any column, masked
        taken = np.take_along_axis(logp, column[..., None], axis=-1)[..., 0]
        return taken, logp, feats, column

    def _loss_and_grad(self, batch: Mapping[str, Any], *, grad: bool
                       ) -> tuple[float, np.ndarray, dict[str, float]]:
        k = self.keys
        a, b = operands(batch[k["prompt"]])
        responses = np.asarray(batch[k["response"]])
        mask = np.asarray(batch[k["mask"]], dtype=bool)
        old = np.asarray(batch[k["old_logprob"]], dtype=np.float64)
        ref = np.asarray(batch[k["ref_logprob"]], dtype=np.float64)
        adv = np.asarray(batch[k["advantage"]], dtype=np.float64)
        adv = adv[:, None] if adv.ndim == 1 else adv
        if not mask.any():
            raise ValueError("the batch has no response token under its mask")
        new, logp, feats, column = self._forward(a, b, responses, self.weights)
        ratio = np.exp(np.where(mask, new - old, 0.0))
        unclipped = ratio * adv
        clipped = np.clip(ratio, 1 - self.clip, 1 + self.clip) * adv
        x = np.where(mask, ref - new, 0.0)
        k3 = np.exp(x) - x - 1
        n = mask.sum()
        per_token = -np.minimum(unclipped, clipped) + self.beta * k3
        loss = float(per_token[mask].sum() / n)
        stats = {"kl": float(k3[mask].sum() / n),
                 "clip_fraction": float((clipped < unclipped)[mask].mean())}
        if not grad:
            return loss, np.zeros(0), stats
        # d loss / d log π(token): the surrogate's branch min() took, plus β·(1 − e^x) of k3
        d_new = (-np.where(unclipped <= clipped, unclipped, 0.0)
                 + self.beta * (1 - np.exp(x))) * mask / n
        d_logits = (np.eye(len(GENERATED))[column] - np.exp(logp)) * d_new[..., None]
        gradient = np.zeros_like(self.weights)
        np.add.at(gradient, feats.reshape(-1),
                  np.repeat(d_logits.reshape(-1, len(GENERATED)), feats.shape[-1], axis=0))
        return loss, gradient, stats


def _until_eos(tokens: np.ndarray) -> list[int]:
    out: list[int] = []
    for token in tokens.tolist():
        out.append(token)
        if token == EOS:
            break
    return out
