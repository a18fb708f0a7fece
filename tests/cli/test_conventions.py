"""The conventions every command follows: --version, help for every flag, exit codes in every
command's help, `-o` a file and `--out-dir` a folder (the old `--out DIR` is gone), and
`--model`/`--loss` importing a script without its main block.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import gyre_contract
from gyre_contract.cli._app import build_parser, run


def call(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def commands() -> dict:
    subparsers = next(a for a in build_parser()._actions if a.dest == "command")
    return dict(subparsers.choices)


def test_version():
    code, out, _ = call("--version")
    assert code == 0 and out.strip() == f"gyre-contract {gyre_contract.__version__}"
    done = subprocess.run([sys.executable, "-m", "gyre_contract", "--version"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and gyre_contract.__version__ in done.stdout


@pytest.mark.parametrize("name", sorted(commands()))
def test_every_flag_has_help_and_the_help_lists_exit_codes(name):
    parser = commands()[name]
    for action in parser._actions:
        assert action.help and action.help.strip(), f"{name} {action.option_strings or action.dest}"
    text = parser.format_help()
    assert "exit codes: 0 " in text and " 1 " in text.split("exit codes:")[1] \
        or "exit codes: 0 " in text and "2 " in text.split("exit codes:")[1], text
    assert "--format" not in text or "text" in text.split("--format", 1)[1]


@pytest.mark.parametrize("name", sorted(commands()))
def test_o_means_a_file_and_out_dir_a_folder(name):
    for action in commands()[name]._actions:
        if "--out" in action.option_strings:
            assert "-o" in action.option_strings, f"{name} --out must be -o FILE"
        if "--out-dir" in action.option_strings:
            assert action.metavar == "DIR"
        if "-o" in action.option_strings:
            assert action.metavar != "DIR"


@pytest.mark.parametrize("name", sorted(commands()))
def test_every_output_option_is_guarded(name):
    """An option that names what a command writes is in OUTPUTS: every other file argument is
    an input that no output may replace (`common.outputs_guarded`)."""
    from gyre_contract.cli._conventions import OUTPUTS

    for action in commands()[name]._actions:
        if {"-o", "--out", "--out-dir", "--write-map", "--plot"} & set(action.option_strings):
            assert action.dest in OUTPUTS, (name, action.option_strings)


def test_export_takes_out_dir_and_no_longer_out(tmp_path):
    code, out, err = call("export", "--out-dir", str(tmp_path / "a"), "--format", "json")
    assert code == 0 and err == ""
    assert [Path(p).name for p in json.loads(out)["written"]] == [
        "rollout_step.v1.json", "train_batch.v1.json", "token_batch.v1.json", "gyre_vocabulary.v1.json"]
    assert call("export", "--out-dir", str(tmp_path / "a"), "--check")[0] == 0
    code, out, err = call("export", "--out", str(tmp_path / "b"))  # removed in 0.3.0
    assert code == 2 and "unrecognized arguments: --out" in err and not (tmp_path / "b").exists()


def test_demo_takes_out_dir_and_no_longer_out(tmp_path):
    parser = build_parser()
    assert parser.parse_args(["demo", "--out-dir", "d"]).out_dir.name == "d"
    code, _, err = call("demo", "--out", str(tmp_path / "d"))  # removed in 0.3.0
    assert code == 2 and "unrecognized arguments: --out" in err and not (tmp_path / "d").exists()


MODEL_SCRIPT = textwrap.dedent('''
    from pathlib import Path

    from gyre_contract import RolloutStep

    class MyStep(RolloutStep):
        """A step model defined in a script."""

    def loss(batch):
        return 0.5

    Path(__file__).with_name("imported.txt").write_text("top-level code runs on import")

    if __name__ == "__main__":
        Path(__file__).with_name("main_block_ran.txt").write_text("the main block ran")
''')


@pytest.mark.parametrize("option", ["--model", "--loss"])
def test_a_script_is_imported_without_running_its_main_block(tmp_path, monkeypatch, option):
    script = tmp_path / "sampler_script.py"
    script.write_text(MODEL_SCRIPT)
    rollouts = tmp_path / "r.jsonl"
    rollouts.write_text(json.dumps({"observation": [0.1], "action": 0, "reward": 1.0, "step": 0,
                                    "episode_id": "a", "terminated": True, "truncated": False,
                                    "policy_version": 0}) + "\n")
    monkeypatch.chdir(tmp_path)
    if option == "--model":
        code, out, err = call("validate", str(rollouts), "--model", f"{script}:MyStep")
        assert code == 0, out + err
    else:
        fmap = tmp_path / "map.json"
        fmap.write_text(json.dumps({"gyre_field_map": 1, "fields": {
            "obs": {"from": "observation"}, "reward": {"from": "reward"}}}))
        call("batch", str(rollouts), "--map", str(fmap), "--loss", f"{script}:loss")
    assert (tmp_path / "imported.txt").exists()
    assert not (tmp_path / "main_block_ran.txt").exists()


def test_a_module_failing_on_import_is_one_line_exit_2(tmp_path, monkeypatch):
    (tmp_path / "exits.py").write_text("import sys\nsys.exit(3)\n")
    (tmp_path / "raises.py").write_text("raise RuntimeError('boom')\n")
    monkeypatch.chdir(tmp_path)
    for spec in ("exits.py:X", "raises.py:X", "raises:X"):
        code, _, err = call("validate", "x.jsonl", "--model", spec)
        assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert "failed" in err


def test_output_files_are_replaced_atomically(tmp_path, monkeypatch):
    """A write that fails leaves the old file as it was and no temporary file behind."""
    from gyre_contract.io._atomic import atomic_path

    target = tmp_path / "schema.json"
    target.write_text("old")

    def broken(tmp: str) -> None:
        Path(tmp).write_text("half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError), atomic_path(target) as tmp:
        broken(tmp)
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["schema.json"]
    with atomic_path(target) as tmp:
        Path(tmp).write_text("new")
    assert target.read_text() == "new"


def test_what_the_parsers_spell_is_what_the_library_takes():
    """The parsers spell a few of the library's values themselves, so that `--help` imports no
    machinery (tests/test_package.py): each must stay the library's own."""
    from gyre_contract.cli import _compat, _conventions, _diff
    from gyre_contract.schema._compatibility import MODES
    from gyre_contract.schema._diffreport import FORMATS
    from gyre_contract.schema._layouts import BATCH_DIMS_SPELLINGS

    assert _compat.MODES == MODES
    assert _diff.FORMATS == FORMATS
    assert _conventions.BATCH_DIMS_SPELLINGS == BATCH_DIMS_SPELLINGS


@pytest.mark.parametrize("name", sorted(commands()))
def test_a_command_parsed_alone_is_the_command_of_the_whole_parser(name):
    """`run` builds only the parser of the command it is given (`named_command`): its help and
    usage are those of the same command in the parser of every command."""
    from gyre_contract.cli._app import named_command

    assert named_command([name, "x"]) == named_command(["--debug", name]) == name
    assert named_command(["-h", name]) is None and named_command([name[:-1]]) is None
    alone = build_parser(name)
    only = next(a for a in alone._actions if a.dest == "command").choices
    assert list(only) == [name]
    assert only[name].format_help() == commands()[name].format_help()
