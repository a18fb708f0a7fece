"""The diff's converters: how a trainer field with no sampler field of its role is computed from
others (docs/contract.md §6): done = any(terminated, truncated), episode_start from step, the mask
from padding, advantage and return by GAE, ...

Each converter gives the sampler fields it reads, the field-map entry that computes it (None when
no map entry can, docs/contract.md §7), a formula, the reason, and what a person must write by
hand when the map cannot express it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gyre_contract.schema._diffreport import Conversion
from gyre_contract.schema._fieldtable import Dim, Dtype, Field, FieldTable
from gyre_contract.schema._layouts import Layout
from gyre_contract.schema._roles import synonyms
from gyre_contract.schema._shaperules import strip_batch_dims

Derivation = tuple[list[str], dict[str, Any] | None, str, str, str]
"""(sampler fields read, map entry or None, formula, reason, what to write by hand or "")."""


class Converters:
    """The converters for one sampler table, computing trainer fields of `t_tab`."""

    def __init__(self, s_tab: FieldTable, t_tab: FieldTable, by_role: dict[str, list[Field]],
                 gamma: float, lam: float) -> None:
        self.s_tab, self.t_tab = s_tab, t_tab
        self.by_role = by_role
        self.gamma, self.lam = gamma, lam

    def have(self, role: str) -> Field | None:
        """The first sampler field of `role`, None when the sampler has none."""
        fields = self.by_role.get(role)
        return fields[0] if fields else None

    def derive(self, t: Field) -> Derivation | None:
        """How trainer field `t` is computed from the sampler's fields, None when it cannot be."""
        build = getattr(self, f"_derive_{t.role}", None)
        return build(t) if build is not None else None

    def missing(self, t: Field) -> str:
        """Why trainer field `t` has no source and no converter (the `missing` entry's reason)."""
        if t.role == "advantage" and self.have("value") is not None:
            lacking = [r for r in ("reward", "terminated", "truncated") if self.have(r) is None]
            return f"no advantage in the sampler, and GAE also needs {', '.join(lacking)}"
        return missing_reason(t)

    def _derive_done(self, t: Field) -> Derivation | None:
        flags = [f.name for f in (self.have("terminated"), self.have("truncated")) if f]
        if not flags:
            return None
        text = f"any({', '.join(flags)})"
        reason = "done = terminated OR truncated"
        if len(flags) == 1:
            reason = f"done = {flags[0]} only: the sampler records no " + \
                ("truncated" if self.have("terminated") else "terminated") + " flag"
        return flags, {"op": "any", "from": flags}, text, reason, ""

    def _derive_episode_start(self, t: Field) -> Derivation | None:
        step = self.have("step")
        if step is not None:
            return ([step.name], {"op": "episode_start", "from": step.name},
                    f"episode_start({step.name})",
                    "episode start = the previous step's done (true where step == 0), never "
                    "this step's done", "")
        done = self.have("done")
        if done is not None:
            return ([done.name], {"op": "shift", "from": done.name, "by": 1, "fill": True},
                    f"shift({done.name}, 1)", "episode start = the previous step's done", "")
        return None

    def _derive_terminated(self, t: Field) -> Derivation | None:
        done, trunc = self.have("done"), self.have("truncated")
        if done is None or trunc is None:
            return None
        return ([done.name, trunc.name], {"op": "and_not", "from": [done.name, trunc.name]},
                f"and_not({done.name}, {trunc.name})", "terminated = done AND NOT truncated", "")

    def _derive_truncated(self, t: Field) -> Derivation | None:
        done, term = self.have("done"), self.have("terminated")
        if done is None or term is None:
            return None
        return ([done.name, term.name], {"op": "and_not", "from": [done.name, term.name]},
                f"and_not({done.name}, {term.name})",
                f"truncated = {done.name} AND NOT {term.name} (how RLDS and old Gym mark a "
                f"time-limit end)", "")

    def _derive_mask(self, t: Field) -> Derivation | None:
        t_step, _ = strip_batch_dims(t.shape, tuple(self.t_tab.batch_dims or ()))
        if t_step:
            varying = [f for f in self.s_tab if f.varying]
            varying.sort(key=lambda f: f.role != "action")
            if varying:
                col = f"{varying[0].name}_mask"
                return ([varying[0].name], {"op": "mask", "from": col}, f"mask({col})",
                        f"mask of the real elements of {varying[0].name} (padding of its "
                        f"varying dim)", "")
        manual = ("mask() gives one flag per step; a mask per element needs a sampler field "
                  "whose dim varies (x-gyre-varying-dims)") if t_step else ""
        return [], {"op": "mask"}, "mask()", "mask from padding: True on real steps", manual

    def _derive_advantage(self, t: Field) -> Derivation | None:
        need = self._gae_sources()
        if need is None:
            return None
        sources, lacking = need
        group = self.have("group_id")
        if "value" in lacking and group is not None and self.have("reward") is not None:
            reward = self.have("reward")
            assert reward is not None
            return ([reward.name, group.name], None, f"group_norm({reward.name}, {group.name})",
                    "group-relative advantage (no value for GAE): (reward - group mean) / "
                    "(group std + eps) over the steps of one group_id",
                    "group_norm needs one row per step (a field map with \"rows\": \"step\"): "
                    "a [B, T] batch holds episodes, not the steps of a group; diff against a "
                    "token trainer, or compute the advantage by hand")
        if lacking:
            return None
        entry = {"op": "gae", "from": sources, "gamma": self.gamma, "lam": self.lam}
        return (sources[:4], entry, f"gae({', '.join(sources)})",
                "advantage by GAE (terminated: no bootstrap; truncated: bootstrap from "
                "next_value)", "")

    def _derive_return(self, t: Field) -> Derivation | None:
        has_adv = any(f.role == "advantage" for f in self.t_tab)
        gae_src = self._gae_sources()
        if has_adv and gae_src is not None and not gae_src[1]:
            sources = gae_src[0]
            entry = {"op": "gae", "from": sources, "gamma": self.gamma, "lam": self.lam,
                     "output": "return"}
            return (sources[:4], entry, f"gae({', '.join(sources)}).return",
                    "return = advantage + value (the GAE λ-return, consistent with the "
                    "trainer's advantage)", "")
        reward, term, trunc = (self.have(r) for r in ("reward", "terminated", "truncated"))
        if reward is None or term is None or trunc is None:
            return None
        sources = [reward.name, term.name, trunc.name, "next_value"]
        entry = {"op": "discounted_return", "from": sources, "gamma": self.gamma}
        return (sources[:3], entry, f"discounted_return({', '.join(sources)})",
                "return by discounting the rewards", "")

    def _gae_sources(self) -> tuple[list[str], list[str]] | None:
        roles = ("reward", "value", "terminated", "truncated")
        found = [self.have(r) for r in roles]
        if found[0] is None:
            return None
        lacking = [r for r, f in zip(roles, found) if f is None]
        return [f.name if f else r for f, r in zip(found, roles)] + ["next_value"], lacking

    def _derive_next_observation(self, t: Field) -> Derivation | None:
        obs = self.have("observation")
        if obs is None:
            return None
        return ([obs.name], None, f"next({obs.name}, next_observation)",
                f"next observation = {obs.name} of the next step; the last step of each episode "
                f"needs the final observation, which the sampler does not record",
                "record next_observation on each episode's last step (gyre_contract.Recorder "
                "does), then {\"op\": \"next\", \"from\": [\"" + obs.name + "\", "
                "\"next_observation\"]} computes it for every step")

    def _derive_next_value(self, t: Field) -> Derivation | None:
        value = self.have("value")
        if value is None:
            return None
        return ([value.name], None, f"shift({value.name}, -1)",
                f"next value = {value.name} of the next step, plus the bootstrap value on each "
                f"episode's last step", "shift by -1 with the row's next_value on the last "
                "step: write by hand")



def followed_observation(t: Field, s: Field, s_tab: FieldTable, layout: Layout,
                          step_shape: Callable[[Field], tuple[Dim, ...] | None]) -> Field | None:
    """The sampler observation that `s` follows, when `s` is an optional next observation (a
    sampler records it on an episode's last step only, the true final observation) and the
    trainer reads one on every step of a batch: the map computes it with `next`. None for a
    rename (a next observation the sampler records on every step, or a per-step trainer)."""
    if t.role != "next_observation" or s.role != "next_observation" or s.required \
            or layout.kind not in ("batch", "time_major", "flat"):
        return None
    names = [s.name.replace("next_observation", "observation", 1),
             s.name.removeprefix("next_").removeprefix("next.")]
    found = [s_tab[n] for n in names if n in s_tab and n != s.name]
    observations = [f for f in s_tab if f.role == "observation"]
    for obs in (found or (observations if len(observations) == 1 else []))[:1]:
        if obs.role == "observation" and obs.dtype == s.dtype and \
                step_shape(obs) == step_shape(s):
            return obs
    return None


def next_conversion(obs: Field, s: Field, then: Conversion | None) -> tuple[Conversion, str]:
    """The conversion by `next` from `obs` and `s` (the next step's observation within the
    episode, `s` on its last step), followed by `then`, the one-source conversion (cast, shape,
    layout) a rename of `s` would need; and its reason."""
    own: dict[str, Any] = {"op": "next", "from": [obs.name, s.name]}
    entry: dict[str, Any] | None = own
    ops, texts = ["next"], [f"next({obs.name}, {s.name})"]
    manual = ""
    if then is not None:
        ops += [op for op in then.ops if op not in ops]
        texts.append(then.text)
        if then.entry is None:
            manual, entry = f"{texts[0]} then {then.manual}", None
        else:
            first = {k: v for k, v in then.entry.items() if k not in ("op", "from", "then", "cast")}
            steps = [{"op": then.entry["op"], **first}] if then.entry.get("op") else []
            steps += then.entry.get("then", [])
            own.update({"then": steps} if steps else {})
            own.update({"cast": then.entry["cast"]} if "cast" in then.entry else {})
    reason = (f"the next step's {obs.name} within the episode, {s.name} on its last step "
              f"(where a sampler records it); an episode whose last step lacks it fails the "
              f"batch")
    if then is not None:
        reason = f"{then.text}; {reason}"
    return Conversion(tuple(ops), "; ".join(texts), entry, then.cast if then else None,
                      manual), reason


def derived_output(role: str) -> tuple[Dtype, tuple[Dim, ...] | None]:
    """dtype and per-step shape a converter of `role` produces (None, None: as its sources)."""
    if role in ("done", "terminated", "truncated", "episode_start", "mask"):
        return "bool", ()
    if role in ("advantage", "return", "next_value"):
        return "float32", ()
    return None, None


def missing_reason(t: Field) -> str:
    """Why trainer field `t` has no source and no converter, for the `missing` entry."""
    if t.role == "ref_logprob":
        return ("no sampler field holds a reference-policy log-prob; the behaviour logprob is "
                "never one (compute it with the reference model)")
    if t.role == "logprob":
        return "no sampler field holds the behaviour log-prob (logprob); a ref_logprob is never one"
    if t.role == "other":
        return f"no sampler field named {t.name}, and the name has no known role"
    if t.role == "advantage":
        return "no value for GAE and no group_id for a group-relative advantage"
    if t.role == "group_id":
        return ("no sampler field holds a group id (group_id; verl uid, prompt_id): the steps "
                "sampled for one prompt cannot be told apart; episode_id is never one")
    looked = ", ".join(synonyms(t.role)[:6])
    return f"no sampler field with the role {t.role} (looked for {looked}, ...) and no converter"
