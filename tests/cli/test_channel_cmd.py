"""`gyre-contract channel status|check`: exit 0 the counts agree, 1 they disagree, 2 not a
channel or a refused handshake; `--format json` for scripts."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "channel"))

from procs import CARTPOLE_MAP, CartStep, episodes

from gyre_contract.channel import open_sampler, open_trainer
from gyre_contract.cli._app import run


def call(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return run(list(argv), out, err), out.getvalue(), err.getvalue()


def busy_channel(folder: Path) -> None:
    sampler = open_sampler(folder, model=CartStep)
    trainer = open_trainer(folder, map=CARTPOLE_MAP)
    for i in range(3):
        sampler.put(episodes(f"p{i}", 2, version=i))
    trainer.ack(trainer.get(rows=10, timeout=5))
    trainer.get(timeout=5)  # the other two, in flight: delivered, not acked
    trainer.set_version(3)


def test_status_shows_both_ends_and_exits_0_when_they_agree(tmp_path):
    busy_channel(tmp_path / "ch")
    code, out, _ = call("channel", "status", str(tmp_path / "ch"))
    assert code == 0, out
    assert "sampler fingerprint sha256:" in out and "(CartStep)" in out
    assert "(epoch 1, version 3)" in out and "counts agree" in out
    code, out, _ = call("channel", "status", str(tmp_path / "ch"), "--format", "json")
    data = json.loads(out)
    assert code == 0 and data["ok"] is True
    assert data["put"] == {"segments": 3, "steps": 30, "episodes": 6}
    assert data["acked"]["steps"] == 10 and data["pending"] == {"segments": 2, "steps": 20,
                                                               "in_flight": 2}
    assert set(data["times"]) == {"first_put", "last_put", "first_ack", "last_ack"}


def test_status_exits_1_when_a_segment_is_missing(tmp_path):
    busy_channel(tmp_path / "ch")
    victim = sorted((tmp_path / "ch" / "segments").glob("*.arrow"))[-1]
    victim.unlink()  # lost: the writer numbered it, nobody can deliver it
    code, out, _ = call("channel", "status", str(tmp_path / "ch"))
    assert code == 1 and "DISAGREE: writer" in out and "1 missing here (seq 3)" in out
    code, out, _ = call("channel", "status", str(tmp_path / "ch"), "--format", "json")
    assert code == 1 and json.loads(out)["problem_count"] == 1


def test_status_exits_2_with_the_path_when_it_is_not_a_channel(tmp_path):
    code, out, err = call("channel", "status", str(tmp_path / "nothing"))
    assert code == 2 and str(tmp_path / "nothing") in err
    code, out, _ = call("channel", "status", str(tmp_path / "nothing"), "--format", "json")
    assert code == 2 and json.loads(out)["ok"] is False


def test_check_exits_2_naming_the_fields_a_map_cannot_find(tmp_path):
    open_sampler(tmp_path / "ch", model=CartStep)
    bad = tmp_path / "map.json"
    bad.write_text(json.dumps({"gyre_field_map": 1, "fields": {
        "obs": {"from": "observation"}, "q": {"from": "q_value"}, "mask": {"op": "mask"}}}))
    code, _, err = call("channel", "check", str(tmp_path / "ch"), "--map", str(bad))
    assert code == 2 and "map.fields.q: the map reads q_value" in err
    code, out, _ = call("channel", "check", str(tmp_path / "ch"), "--map", str(CARTPOLE_MAP))
    assert code == 0 and "the map runs on the sampler's records" in out
    assert json.loads((tmp_path / "ch" / "channel.json").read_text())["trainer"] is None
