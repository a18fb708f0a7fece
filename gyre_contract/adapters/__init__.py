"""Into the trainer's hands, and out of the sampler's: a batch in the trainer's own container,
and a generation engine's output as step records.

- `to_torch(batch)`: a nested dict of `torch.Tensor` sharing the arrays' memory on CPU;
- `to_tensordict(batch)`: a `tensordict.TensorDict` (what TorchRL's losses read);
- `to_dataproto(batch)`: verl's `DataProto`;
- `from_vllm(request_output, rewards=..., policy_version=...)`: one step record per completion.

Each library is imported only when its function is called (extras `torch`, `verl`), and a
missing one is one line naming the extra to install; vLLM is never imported (its objects are
read by their attributes). Names load on first use (PEP 562).
"""

from gyre_contract.core._lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "._containers": ("to_torch", "to_tensordict", "to_dataproto"),
    "._generation": ("from_vllm",),
})
