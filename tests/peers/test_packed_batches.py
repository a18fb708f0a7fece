"""A packed batch (`"layout": "packed"`) in a real torch model (`pytest -m peers`).

A tiny causal language model, built here with random weights (no download), runs on the padded
batch (verl's layout: `input_ids`, `attention_mask`, `position_ids` from `concat`) and on the
packed batch with a block-diagonal causal mask built from `position_ids` (each run from 0 is one
sequence: what a flash-attention varlen kernel does with `cu_seqlens`). Every sample's per-token
log-probs on its response tokens are the same in both, to 1e-5. `to_torch` and `to_tensordict`
take a packed batch as it is: tensors sharing the arrays' memory, strings as numpy object
arrays or non-tensor entries.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from gyre_contract.adapters import to_tensordict, to_torch
from gyre_contract.trainer import FieldMap

torch = pytest.importorskip("torch")
pytest.importorskip("tensordict")

pytestmark = [pytest.mark.peers, pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::UserWarning")]

VOCAB, WIDTH, MAX_POSITION = 50, 16, 64
BUDGET = 24


def completions(seed: int = 0) -> list[dict[str, Any]]:
    """Three prompts, three completions each, of 1..6 prompt and 1..9 response tokens."""
    rng = np.random.default_rng(seed)
    out = []
    for g in range(3):
        prompt = rng.integers(1, VOCAB, int(rng.integers(1, 7))).tolist()
        for k in range(3):
            n = int(rng.integers(1, 10))
            out.append({"observation": {"token_ids": prompt},
                        "action": rng.integers(1, VOCAB, n).tolist(),
                        "logprob": (-rng.random(n) - 0.01).tolist(), "reward": float(k),
                        "step": 0, "episode_id": f"g{g}/{k}", "terminated": True,
                        "truncated": False, "policy_version": 1, "group_id": f"g{g}"})
    return out


PADDED = {"gyre_field_map": 1, "rows": "step", "fields": {
    "input_ids": {"op": "concat", "from": ["prompt_ids", "response_ids"]},
    "attention_mask": {"op": "concat", "from": ["prompt_ids", "response_ids"],
                       "output": "attention_mask"},
    "position_ids": {"op": "concat", "from": ["prompt_ids", "response_ids"],
                     "output": "position_ids"},
    "response_ids": {"from": "response_ids"}, "response_length": {"from": "response_length"}}}
PACKED = {"gyre_field_map": 1, "rows": "step", "layout": "packed", "token_budget": BUDGET,
          "fields": {
              **{k: {"from": k} for k in ("input_ids", "position_ids", "pad_mask",
                                          "sample_index", "episode_id", "policy_version",
                                          "group_id")},
              "loss_mask": {"from": "response_mask"}, "logprobs": {"from": "logprob"},
              "advantages": {"op": "group_norm", "from": ["reward", "group_id"],
                             "then": [{"op": "per_token"}]}}}


class TinyCausalLM(torch.nn.Module):
    """Token and position embeddings, one attention block with an MLP, a language-model head."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.tokens = torch.nn.Embedding(VOCAB, WIDTH)
        self.positions = torch.nn.Embedding(MAX_POSITION, WIDTH)
        self.attention = torch.nn.MultiheadAttention(WIDTH, 2, batch_first=True)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(WIDTH, 4 * WIDTH), torch.nn.GELU(),
                                       torch.nn.Linear(4 * WIDTH, WIDTH))
        self.norm = torch.nn.LayerNorm(WIDTH)
        self.head = torch.nn.Linear(WIDTH, VOCAB)
        self.double()

    def forward(self, ids: Any, positions: Any, allowed: Any) -> Any:
        """Log-probs `[N, L, VOCAB]`; `allowed[n, i, j]`: token i attends to token j."""
        x = self.tokens(ids) + self.positions(positions)
        heads = self.attention.num_heads
        blocked = ~allowed.repeat_interleave(heads, dim=0)
        h, _ = self.attention(x, x, x, attn_mask=blocked, need_weights=False)
        x = self.norm(x + h)
        x = x + self.mlp(x)
        return torch.log_softmax(self.head(x), dim=-1)


def token_logprobs(model: TinyCausalLM, ids: np.ndarray, positions: np.ndarray,
                   allowed: np.ndarray) -> np.ndarray:
    """`[N, L]`: at each position t > 0 the log-prob of token t given the tokens before it."""
    with torch.no_grad():
        logp = model(torch.from_numpy(ids), torch.from_numpy(positions),
                     torch.from_numpy(allowed)).numpy()
    out = np.zeros(ids.shape)
    out[:, 1:] = np.take_along_axis(logp[:, :-1], ids[:, 1:, None], axis=-1)[..., 0]
    return out


def padded_logprobs(model: TinyCausalLM, rows: list[dict[str, Any]]) -> list[np.ndarray]:
    """Each sample's response-token log-probs from the padded batch (left-padded prompt,
    right-padded response, causal mask over the real tokens)."""
    b = FieldMap.from_dict(PADDED).build(rows)
    real = b["attention_mask"]
    width = real.shape[1]
    causal = np.tril(np.ones((width, width), bool))
    allowed = causal[None] & real[:, None, :]
    allowed |= np.eye(width, dtype=bool)[None]  # a padding query attends to itself: no NaN
    logp = token_logprobs(model, b["input_ids"], b["position_ids"], allowed)
    first = width - b["response_ids"].shape[1]  # the response starts after the padded prompt
    return [logp[i, first:first + n] for i, n in enumerate(b["response_length"].tolist())]


def block_diagonal(positions: np.ndarray) -> np.ndarray:
    """`[M, S, S]`: causal within each run of `position_ids` from 0, nothing across runs."""
    runs = np.cumsum(positions == 0, axis=1)
    same = runs[:, :, None] == runs[:, None, :]
    return same & np.tril(np.ones(positions.shape[1:] * 2, bool))[None]


def test_a_packed_batch_gives_each_sample_the_log_probs_of_the_padded_one():
    rows = completions()
    model = TinyCausalLM()
    packed = FieldMap.from_dict(PACKED).batch(rows)
    assert packed["input_ids"].shape[0] < len(rows)  # several samples share a micro-batch row
    logp = token_logprobs(model, packed["input_ids"], packed["position_ids"],
                          block_diagonal(packed["position_ids"]))
    expected = padded_logprobs(model, rows)
    for i, r in enumerate(rows):
        prompt, n = len(r["observation"]["token_ids"]), len(r["action"])
        mine = packed["sample_index"] == i
        at = np.flatnonzero(mine.reshape(-1))
        assert at.size == prompt + n
        response = logp.reshape(-1)[at[prompt:]]
        np.testing.assert_allclose(response, expected[i], atol=1e-5, rtol=0)
    # the loss reads the same tokens: its mask is the response tokens of each sample
    assert packed["loss_mask"].sum() == sum(len(r["action"]) for r in rows)


def test_to_torch_and_to_tensordict_take_a_packed_batch():
    packed = FieldMap.from_dict(PACKED).batch(completions())
    tensors = to_torch(packed)
    assert tensors["input_ids"].shape == packed["input_ids"].shape
    assert np.shares_memory(tensors["input_ids"].numpy(), packed["input_ids"])
    assert tensors["episode_id"].dtype == object
    td = to_tensordict(packed)  # [M, S] and per-sample [B] arrays share no leading dim
    assert td.batch_size == torch.Size([])
    assert np.shares_memory(td["position_ids"].numpy(), packed["position_ids"])
    tokens_only = {k: v for k, v in packed.items() if v.ndim == 2}
    td = to_tensordict(tokens_only, batch_dims=["M"])  # what the map records
    assert td.batch_size == torch.Size([packed["input_ids"].shape[0]])
    row = td[0]
    assert row["sample_index"].shape == (BUDGET,)
