"""Delivery semantics on every backend, in one process (the process tests run the same things
across OS processes): put → get → ack, leases, redelivery to a new trainer end, stale rows
dropped by episode or refused, backpressure, timeouts, several samplers, counts that agree."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from procs import CARTPOLE_MAP, TOKEN_MAP, CartStep, Completion, completions, episodes

from gyre_contract.channel import open_sampler, open_trainer
from gyre_contract.channel._ends import ChannelWarning
from gyre_contract.channel._handshake import HandshakeError
from gyre_contract.channel._status import channel_status
from gyre_contract.core._errors import ContractError
from gyre_contract.core._tensor import Tensor


def ids_of(delivery) -> list[str]:
    return np.asarray(delivery.batch["episode_id"]).tolist()


def test_put_get_ack_moves_every_step_once(uri):
    sampler = open_sampler(uri, model=CartStep)
    trainer = open_trainer(uri, map=CARTPOLE_MAP)
    for i in range(3):
        sampler.put(episodes(f"p{i}", 4, length=5, version=i))
    first = trainer.get(rows=40, timeout=5)
    assert len(first.segments) == 2 and first.steps == 40 and first.episodes == 8
    assert first.batch["obs"].shape == (8, 5, 4) and first.batch["mask"].all()
    assert first.policy_versions == [0, 1]
    trainer.ack(first)
    second = trainer.get(timeout=5)
    trainer.ack(second)
    trainer.ack(second)  # again: nothing changes
    assert sorted(ids_of(first) + ids_of(second)) == sorted(
        f"p{i}-{e}" for i in range(3) for e in range(4))
    status = channel_status(uri)
    assert status.ok, status.problems
    assert status.put == {"segments": 3, "steps": 60, "episodes": 12}
    assert status.acked["segments"] == 3 and status.acked["steps"] == 60
    assert status.pending["segments"] == 0 and status.delivered["redelivered"] == 0


def test_a_lease_keeps_a_second_get_from_the_same_segment(uri):
    sampler = open_sampler(uri, model=CartStep)
    trainer = open_trainer(uri, map=CARTPOLE_MAP)
    sampler.put(episodes("a", 2))
    sampler.put(episodes("b", 2))
    one, two = trainer.get(rows=1, timeout=5), trainer.get(rows=1, timeout=5)
    assert set(one.segments).isdisjoint(two.segments)
    with pytest.raises(TimeoutError, match="2 segments leased to this end"):
        trainer.get(timeout=0.05)
    trainer.release(one)
    assert trainer.get(timeout=5).segments == one.segments


def test_a_segment_not_acked_goes_to_the_next_trainer_end(uri):
    sampler = open_sampler(uri, model=CartStep)
    old = open_trainer(uri, map=CARTPOLE_MAP)
    sampler.put(episodes("a", 3))
    taken = old.get(timeout=5)
    new = open_trainer(uri, map=CARTPOLE_MAP)  # a restart: the old end never acked
    again = new.get(timeout=5)
    assert again.segments == taken.segments and ids_of(again) == ids_of(taken)
    with pytest.raises(RuntimeError, match="another trainer end opened the channel"):
        old.get(timeout=0.05)
    new.ack(again)
    status = channel_status(uri)
    assert status.ok and status.delivered["redelivered"] == 1 and status.acked["steps"] == 15


def test_stale_rows_are_dropped_by_episode_and_counted(uri):
    sampler = open_sampler(uri, model=CartStep)
    trainer = open_trainer(uri, map=CARTPOLE_MAP)
    sampler.put(episodes("old", 2, version=1))  # all stale: committed as dropped at once
    mixed = episodes("mix", 2, version=3)
    for record in mixed[:5]:  # episode mix-0 started under version 2
        record["policy_version"] = 2 if record["step"] < 2 else 3
    sampler.put(mixed)
    got = trainer.get(current_version=4, max_staleness=1, timeout=5)
    assert ids_of(got) == ["mix-1"]  # mix-0 dropped whole: its steps are never split
    assert (got.steps, got.dropped_steps, got.dropped_episodes) == (5, 15, 3)
    assert len(got.dropped_segments) == 1 and len(got.segments) == 1
    assert got.staleness == {1: 5}
    trainer.ack(got)
    status = channel_status(uri)
    assert status.ok, status.problems
    assert status.dropped == {"segments": 1, "steps": 15, "episodes": 3}
    assert status.acked["steps"] + status.dropped["steps"] == status.put["steps"] == 20
    assert status.staleness == {1: 5}


def test_stale_rows_can_be_refused(uri):
    sampler = open_sampler(uri, model=CartStep)
    trainer = open_trainer(uri, map=CARTPOLE_MAP)
    sampler.put(episodes("old", 2, version=0))
    with pytest.raises(ContractError, match=r"policy_version >= 2 \(current 3, max_staleness 1\)"):
        trainer.get(current_version=3, max_staleness=1, on_stale="error", timeout=5)
    assert channel_status(uri).pending["segments"] == 1  # nothing dropped, nothing leased
    assert trainer.get(timeout=5).steps == 10


def test_get_times_out_when_nothing_arrives(uri):
    open_sampler(uri, model=CartStep)
    trainer = open_trainer(uri, map=CARTPOLE_MAP)
    with pytest.raises(TimeoutError, match="nothing deliverable"):
        trainer.get(rows=10, timeout=0.05)


def test_get_waits_for_rows_then_delivers_what_is_there_at_the_timeout(uri):
    sampler = open_sampler(uri, model=CartStep)
    trainer = open_trainer(uri, map=CARTPOLE_MAP)
    sampler.put(episodes("a", 1))
    got = trainer.get(rows=1000, timeout=0.1)
    assert got.steps == 5


def test_put_waits_while_max_pending_segments_are_not_acked(uri):
    sampler = open_sampler(uri, model=CartStep, max_pending=1, timeout=0.05)
    trainer = open_trainer(uri, map=CARTPOLE_MAP)
    sampler.put(episodes("a", 1))
    with pytest.raises(TimeoutError, match=r"1 segments .* not acked \(max_pending 1\)"):
        sampler.put(episodes("b", 1))
    trainer.ack(trainer.get(timeout=5))
    sampler.put(episodes("b", 1))
    assert channel_status(uri).put["segments"] == 2


def test_two_samplers_one_trainer(uri):
    one = open_sampler(uri, model=CartStep)
    two = open_sampler(uri, model=CartStep)
    trainer = open_trainer(uri, map=CARTPOLE_MAP)
    for i in range(2):
        one.put(episodes(f"one{i}", 2))
        two.put(episodes(f"two{i}", 3))
    seen = []
    while True:
        try:
            delivery = trainer.get(timeout=0.2)
        except TimeoutError:
            break
        seen += ids_of(delivery)
        trainer.ack(delivery)
    assert sorted(seen) == sorted([f"one{i}-{e}" for i in range(2) for e in range(2)]
                                  + [f"two{i}-{e}" for i in range(2) for e in range(3)])
    status = channel_status(uri)
    assert status.ok and status.writers == 2 and status.put["steps"] == 50


def test_token_rows_count_one_row_per_generation(uri):
    sampler = open_sampler(uri, model=Completion)
    trainer = open_trainer(uri, map=TOKEN_MAP)
    sampler.put(completions("c", 6))
    sampler.put(completions("d", 6, version=1))
    got = trainer.get(rows=7, timeout=5)
    assert got.steps == 12 and got.batch["response_ids"].shape[0] == 12
    assert got.batch["response_mask"].sum() == sum(
        len(r["action"]) for r in completions("c", 6) + completions("d", 6))


def test_an_episode_put_in_two_pieces_is_one_row_when_delivered_together(uri):
    sampler = open_sampler(uri, model=CartStep)
    trainer = open_trainer(uri, map=CARTPOLE_MAP)
    steps = episodes("long", 1, length=6)
    sampler.put(steps[:3])
    sampler.put(steps[3:])
    got = trainer.get(rows=6, timeout=5)
    assert got.batch["mask"].shape == (1, 6) and got.batch["mask"].all()


def test_a_bad_put_writes_nothing_and_the_sampler_can_go_on(uri):
    sampler = open_sampler(uri, model=CartStep)
    bad = episodes("a", 2)
    bad[3]["reward"] = float("nan")
    bad[7]["step"] = 9
    with pytest.raises(ContractError) as err:
        sampler.put(bad)
    assert [p.path for p in err.value.problems][:2] == ["steps[3].reward", "steps[7].step"]
    assert channel_status(uri).put["segments"] == 0
    sampler.put(episodes("a", 2))  # the same episodes, fixed: the first attempt left nothing
    assert channel_status(uri).put["segments"] == 1


def test_the_handshake_refuses_a_map_reading_a_field_the_sampler_never_writes(uri):
    bad_map = {"gyre_field_map": 1, "fields": {
        "obs": {"from": "observation"}, "adv": {"from": "advantage"},
        "mask": {"op": "mask"}}}
    open_sampler(uri, model=CartStep)
    with pytest.raises(HandshakeError, match=r"map.fields.adv: the map reads advantage, which "
                       r"the sampler never writes") as err:
        open_trainer(uri, map=bad_map)
    assert err.value.exit_code == 2
    assert channel_status(uri).trainer is None  # refused before anything was written


def test_the_handshake_runs_at_whichever_end_opens_second(uri):
    token_map_on_cartpole = dict(TOKEN_MAP)
    open_trainer(uri, map=token_map_on_cartpole)
    with pytest.raises(HandshakeError, match="observation.token_ids"):
        open_sampler(uri, model=CartStep)  # float observations: no prompt token ids


def test_a_compatible_change_of_the_samplers_schema_is_accepted_with_a_warning(uri):
    open_sampler(uri, model=CartStep)
    trainer = open_trainer(uri, map=CARTPOLE_MAP)

    class Wider(CartStep):
        """CartStep plus an optional field."""

        bonus: Tensor("float32", [], role="other", description="an extra") = None

    with pytest.warns(ChannelWarning, match="changed compatibly"):
        wider = open_sampler(uri, model=Wider)
    wider.put(episodes("w", 1))
    assert trainer.get(timeout=5).steps == 5  # its fingerprint is one the channel accepts
    assert len(channel_status(uri).accepted) == 2


def test_a_breaking_change_of_the_samplers_schema_is_refused(uri):
    from gyre_contract.pinned import CartPoleStep

    open_sampler(uri, model=CartPoleStep)
    with pytest.raises(HandshakeError, match=r"sampler.value: the sampler's schema changed "
                       r"\(field-made-required\)"):
        open_sampler(uri, model=CartStep)  # segments already put may lack value


def test_optional_fields_the_map_reads_are_a_warning(uri):
    from gyre_contract.pinned import CartPoleStep

    open_sampler(uri, model=CartPoleStep)
    with pytest.warns(ChannelWarning, match=r"marks optional: value \(for advantage, return, "
                      r"value\); logprob \(for logprob\)"):
        open_trainer(uri, map=CARTPOLE_MAP)


def test_the_trainer_version_reaches_the_sampler(uri):
    sampler = open_sampler(uri, model=CartStep)
    trainer = open_trainer(uri, map=CARTPOLE_MAP)
    assert sampler.trainer_version is None
    trainer.set_version(7)
    assert sampler.trainer_version == 7
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = open_trainer(uri, map=CARTPOLE_MAP)
    assert again.version == 7  # a restarted trainer starts from the published version


def test_a_trainer_behind_lists_the_channel_once_for_many_gets_oldest_first(uri, monkeypatch):
    """A trainer behind by many segments takes them oldest first from one listing; a segment
    put meanwhile comes when they run out; a released segment (older) comes first again."""
    sampler = open_sampler(uri, model=CartStep)
    trainer = open_trainer(uri, map=CARTPOLE_MAP)
    for i in range(4):
        sampler.put(episodes(f"s{i}", 1, length=5))
    listings = []
    cls = type(trainer.backend)
    real = cls.pending
    monkeypatch.setattr(cls, "pending", lambda self: listings.append(1) or real(self))
    got = []
    for _ in range(2):
        delivery = trainer.get(rows=5, timeout=5)
        got += ids_of(delivery)
        trainer.ack(delivery)
    sampler.put(episodes("late", 1, length=5))
    taken = trainer.get(rows=5, timeout=5)
    trainer.release(taken)  # s2 given back: older than what the listing still holds
    for _ in range(3):
        delivery = trainer.get(rows=5, timeout=5)
        got += ids_of(delivery)
        trainer.ack(delivery)
    assert got == ["s0-0", "s1-0", "s2-0", "s3-0", "late-0"]
    assert len(listings) == 2  # at the first get, and at the get after the release
    assert channel_status(uri).acked["segments"] == 5


def test_packed_token_rows_are_delivered_packed(tmp_path):
    """A packed map at the trainer's end: the delivery is the packed batch `FieldMap.batch`
    builds from the same steps (the layout object, nothing else, decides)."""
    from gyre_contract.trainer._fieldmap import FieldMap

    packed = {**TOKEN_MAP, "layout": "packed", "token_budget": 32, "fields": {
        **{k: {"from": k} for k in ("input_ids", "position_ids", "pad_mask", "sample_index",
                                    "episode_id", "policy_version")},
        "loss_mask": {"from": "response_mask"}, "logprobs": {"from": "logprob"},
        "advantages": {"from": "reward", "then": [{"op": "per_token"}]}}}
    uri = str(tmp_path / "channel")
    sampler = open_sampler(uri, model=Completion)
    trainer = open_trainer(uri, map=packed)
    steps = completions("c", 6)
    sampler.put(steps)
    got = trainer.get(rows=6, timeout=5)
    expected = FieldMap.from_dict(packed).batch(steps, model=Completion)
    assert got.steps == 6 and sorted(got.batch) == sorted(expected)
    for key, value in expected.items():
        np.testing.assert_array_equal(got.batch[key], value, err_msg=key)
    assert got.batch["input_ids"].shape[1] == 32


def test_a_segment_counts_its_steps_per_policy_version(uri):
    """A put of one version and a put of several: each segment's facts count the steps of
    each version (what `channel status` adds up), in increasing order."""
    sampler = open_sampler(uri, model=CartStep)
    one = sampler.put(episodes("a", 2, length=3, version=4))
    mixed = episodes("b", 1, length=2, version=7) + episodes("c", 2, length=3, version=2)
    several = sampler.put(mixed + episodes("d", 1, length=1, version=7))
    assert one.policy_versions == {"4": 6}
    assert several.policy_versions == {"2": 6, "7": 3}
    assert list(several.policy_versions) == ["2", "7"]


def test_the_folder_layout_at_a_relative_path_and_a_file_uri(tmp_path, monkeypatch):
    """A channel named by a relative path (the sampler) and by a `file://` URI of it (the
    trainer) is one folder: each segment `segments/<id>.<crc>.arrow` (`.d1` once delivered,
    gone once acked and the end closed, no temporary file left), one ack line per segment in
    `acks/trainer-<epoch>.jsonl`, one ledger line per put in `writers/<writer>.jsonl`."""
    import os
    from pathlib import Path

    def lines(path):
        return [json.loads(line) for line in Path(path).read_text().splitlines()]

    monkeypatch.chdir(tmp_path)
    sampler = open_sampler("ch", model=CartStep, writer="w1")
    trainer = open_trainer("file://ch", map=CARTPOLE_MAP)
    metas = [sampler.put(episodes(f"p{i}", 2, length=3)) for i in range(2)]
    names = sorted(os.listdir("ch/segments"))
    assert [n.split(".")[0] for n in names] == [m.segment for m in metas]
    assert all(len(n.split(".")) == 3 and n.endswith(".arrow") for n in names)
    got = trainer.get(rows=1, timeout=5)
    assert got.segments == (metas[0].segment,)
    assert sorted(os.listdir("ch/segments")) == [names[0].replace(".arrow", ".d1.arrow"),
                                                 names[1]]
    trainer.ack(got)  # the acked file goes on the end's own thread: gone by `close`
    assert names[1] in os.listdir("ch/segments")
    assert set(os.listdir("ch/segments")) <= {names[0].replace(".arrow", ".d1.arrow"), names[1]}
    acks = lines(f"ch/acks/trainer-{trainer.epoch}.jsonl")
    assert [a["segment"] for a in acks] == [metas[0].segment]
    trainer.ack(trainer.get(timeout=5))
    trainer.close()
    assert os.listdir("ch/segments") == []
    acks = lines(f"ch/acks/trainer-{trainer.epoch}.jsonl")
    assert [a["segment"] for a in acks] == [m.segment for m in metas]
    ledger = lines("ch/writers/w1.jsonl")
    assert [(e["seq"], e["steps"]) for e in ledger] == [(1, 6), (2, 12)]
    assert sorted(os.listdir("ch")) == [".channel.lock", "acks", "channel.json", "segments",
                                        "writers"]
    sampler.close()
    trainer.close()
    assert channel_status("ch").ok
