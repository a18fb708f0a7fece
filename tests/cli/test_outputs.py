"""Outputs never lose an input: no output replaces a file the command reads (by any name), a
symbolic link is written through, a FIFO or a device is refused, `-` is stdout where the output
is text, and Ctrl-C leaves the previous output whole (docs/robustness.md, "Outputs, appends and
the terminal")."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from gyre_contract.cli._app import run

ROOT = Path(__file__).resolve().parents[2]
ROLLOUTS = ROOT / "examples" / "cartpole_rollouts.jsonl"
CARTPOLE_MAP = ROOT / "examples" / "cartpole_map.json"
STEP_SCHEMA = ROOT / "schemas" / "rollout_step.v1.json"
ONE_RUN = dict(run_id="a", config="small", rollout_s=1.0, train_s=2.0, total_s=3.5, n_steps=10,
               n_episodes=1, batch_shape=[1, 10], policy_version=0,
               started_at="2026-11-29T10:00:00Z")


def cli(*argv: str | Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run([str(a) for a in argv], out, err)
    assert "Traceback" not in err.getvalue()
    return code, out.getvalue(), err.getvalue()


def one_error(*argv: str | Path) -> str:
    """The one `error: ...` line on stderr of a command that exits 2 and prints nothing else."""
    code, out, err = cli(*argv)
    assert code == 2 and out == "", (code, out, err)
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


def snapshot(folder: Path) -> dict[str, tuple[str, bytes | str]]:
    """Every entry of `folder`: a link as its target, a FIFO as such, a file as its bytes."""
    seen: dict[str, tuple[str, bytes | str]] = {}
    for p in sorted(folder.iterdir()):
        if p.is_symlink():
            seen[p.name] = ("link", os.readlink(p))
        elif p.is_fifo():
            seen[p.name] = ("fifo", "")
        elif p.is_file():
            seen[p.name] = ("file", p.read_bytes())
    return seen


@pytest.fixture
def files(tmp_path: Path) -> Path:
    """A folder with a rollout file, a map, two schemas, an .npz, a run log and links to them."""
    (tmp_path / "r.jsonl").write_bytes(ROLLOUTS.read_bytes())
    (tmp_path / "r.npz").write_bytes(ROLLOUTS.read_bytes())  # JSON Lines under an .npz name
    (tmp_path / "m.json").write_bytes(CARTPOLE_MAP.read_bytes())
    (tmp_path / "s.json").write_bytes(STEP_SCHEMA.read_bytes())
    (tmp_path / "t.json").write_bytes(STEP_SCHEMA.read_bytes())
    np.savez(tmp_path / "b.npz", obs=np.zeros((2, 3, 4), np.float32))
    (tmp_path / "runs.jsonl").write_text(json.dumps(ONE_RUN) + "\n")
    (tmp_path / "link.jsonl").symlink_to("r.jsonl")
    os.link(tmp_path / "s.json", tmp_path / "hard.json")
    return tmp_path


SAME_FILE = {
    "infer r.jsonl -o r.jsonl": ["infer", "r.jsonl", "-o", "r.jsonl"],
    "infer b.npz -o b.npz": ["infer", "b.npz", "-o", "b.npz"],
    "infer r.jsonl -o LINK to it": ["infer", "r.jsonl", "-o", "link.jsonl"],
    "infer LINK -o r.jsonl": ["infer", "link.jsonl", "-o", "r.jsonl"],
    "diff --write-map SAMPLER": ["diff", "s.json", "t.json", "--write-map", "s.json"],
    "diff --write-map TRAINER": ["diff", "s.json", "t.json", "--write-map", "./t.json"],
    "diff --write-map a HARD LINK to the sampler": ["diff", "s.json", "t.json",
                                                    "--write-map", "hard.json"],
    "batch -o ROLLOUTS": ["batch", "r.npz", "--map", "m.json", "-o", "r.npz"],
    "batch -o NAME, written as NAME.npz = ROLLOUTS": ["batch", "r.npz", "--map", "m.json",
                                                      "-o", "r"],
    "runs --plot RUN LOG": ["runs", "runs.jsonl", "--plot", "runs.jsonl"],
}


@pytest.mark.parametrize("case", sorted(SAME_FILE))
def test_an_output_that_is_an_input_is_refused(files, monkeypatch, case) -> None:
    monkeypatch.chdir(files)
    before = snapshot(files)
    err = one_error(*SAME_FILE[case])
    assert "is an input of this command" in err and "name another file" in err
    assert snapshot(files) == before  # nothing replaced, no temporary file left


@pytest.mark.slow  # a real process: about 2 s
def test_an_output_that_is_an_input_is_refused_in_a_real_process(files) -> None:
    before = snapshot(files)
    done = subprocess.run([sys.executable, "-m", "gyre_contract", "infer", "r.jsonl", "-o",
                           "r.jsonl"], cwd=files, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == ("error: cannot write r.jsonl: it is an input of this command, and "
                           "writing would replace it; name another file\n")
    assert snapshot(files) == before


THROUGH_LINKS = {
    "infer -o": (["infer", "r.jsonl", "-o", "out.json"], "out.json"),
    "diff --write-map": (["diff", "s.json", "t.json", "--write-map", "out.json"], "out.json"),
    "batch -o": (["batch", "r.jsonl", "--map", "m.json", "-o", "out.npz"], "out.npz"),
    "runs --plot": (["runs", "runs.jsonl", "--plot", "out.png"], "out.png"),
    "export": (["export", "--out-dir", "."], "rollout_step.v1.json"),
}


@pytest.mark.parametrize("case", sorted(THROUGH_LINKS))
def test_an_output_through_a_symbolic_link_replaces_its_target(files, monkeypatch, case) -> None:
    argv, name = THROUGH_LINKS[case]
    monkeypatch.chdir(files)
    (files / "real").mkdir()
    (files / "real" / name).write_bytes(b"old")
    (files / name).symlink_to(Path("real") / name)
    code, _, err = cli(*argv)
    assert code == 0, err
    assert (files / name).is_symlink() and os.readlink(files / name) == str(Path("real") / name)
    assert (files / "real" / name).read_bytes() != b"old"
    assert not [p for p in (files / "real").iterdir() if p.name.endswith(".tmp")]


def test_a_link_to_a_missing_file_creates_its_target(files, monkeypatch) -> None:
    monkeypatch.chdir(files)
    (files / "dangling.json").symlink_to("new.json")
    assert cli("infer", "r.jsonl", "-o", "dangling.json")[0] == 0
    assert (files / "dangling.json").is_symlink() and json.loads((files / "new.json").read_text())


ONTO = {
    "infer -o": ["infer", "r.jsonl", "-o"],
    "diff --write-map": ["diff", "s.json", "t.json", "--write-map"],
    "batch -o": ["batch", "r.jsonl", "--map", "m.json", "-o"],
    "runs --plot": ["runs", "runs.jsonl", "--plot"],
}


@pytest.mark.parametrize("case", sorted(ONTO))
@pytest.mark.parametrize("kind", ["a FIFO", "a character device"])
def test_an_output_onto_a_fifo_or_a_device_is_refused(files, monkeypatch, case, kind) -> None:
    """A FIFO, or a link to /dev/null (as root, /dev/null itself was once replaced)."""
    monkeypatch.chdir(files)
    target = "out.npz" if case == "batch -o" else "out"
    if kind == "a FIFO":
        os.mkfifo(files / target)
    else:
        (files / target).symlink_to(os.devnull)
    before = snapshot(files)
    err = one_error(*ONTO[case], target)
    assert f"cannot write {target}: not a regular file ({kind})" in err
    assert snapshot(files) == before


def test_an_output_onto_a_folder_is_one_line(files, monkeypatch) -> None:
    monkeypatch.chdir(files)
    (files / "d").mkdir()
    assert "cannot write d: is a directory" in one_error("infer", "r.jsonl", "-o", "d")


def test_dash_is_stdout_for_infer(files, monkeypatch) -> None:
    monkeypatch.chdir(files)
    code, out, err = cli("infer", "r.jsonl", "-o", "-")
    assert code == 0 and "wrote" not in err
    assert (out, err) == cli("infer", "r.jsonl")[1:]
    assert not (files / "-").exists()


@pytest.mark.parametrize(("argv", "says"), [
    (["batch", "r.jsonl", "--map", "m.json", "-o", "-"], "-o -: stdout carries the report"),
    (["diff", "s.json", "t.json", "--write-map", "-"], "--write-map -: stdout carries the report"),
    (["runs", "runs.jsonl", "--plot", "-"], "--plot -: stdout carries the report"),
    (["export", "--out-dir", "-"], "--out-dir -: a folder cannot be stdout"),
])
def test_dash_is_refused_where_stdout_carries_the_report(files, monkeypatch, argv, says) -> None:
    monkeypatch.chdir(files)
    code, out, err = cli(*argv)
    assert code == 2 and out == "" and err.startswith(f"error: {says}"), err
    assert not (files / "-").exists()


# -- Ctrl-C ------------------------------------------------------------------------------------

def _ctrl_c_as_in_a_terminal() -> None:
    """In the child before it runs: Ctrl-C neither ignored nor blocked, as a command started
    from an interactive shell has it (a child inherits an ignored or blocked signal: a library
    or test of this process that ignores SIGINT would make the command deaf to it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _interrupt_mid_run(folder: Path, argv: list[str]) -> subprocess.CompletedProcess:
    """Run `gyre-contract ARGV` reading the FIFO `folder/feed.jsonl`, feed it 2,630 steps (the
    example file 10 times, under new episode ids) and keep it open, so the command is still
    reading, then SIGINT it as Ctrl-C would."""
    feed = folder / "feed.jsonl"
    os.mkfifo(feed)
    proc = subprocess.Popen([sys.executable, "-m", "gyre_contract", *argv], cwd=folder,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(ROOT),
                                 "PYTHONFAULTHANDLER": "1"},
                            preexec_fn=_ctrl_c_as_in_a_terminal)
    try:
        with _open_writer(feed, proc) as writer:
            for n in range(10):
                writer.write(ROLLOUTS.read_bytes().replace(b'"episode_id":"',
                                                           f'"episode_id":"{n}-'.encode()))
            writer.flush()
            time.sleep(0.5)  # the command reads what it was given, then waits for more
            proc.send_signal(signal.SIGINT)
            try:
                out, err = proc.communicate(timeout=120)
            except subprocess.TimeoutExpired:  # hung: every thread's stack (faulthandler)
                proc.send_signal(signal.SIGABRT)
                _, err = proc.communicate(timeout=30)
                raise AssertionError("still running 120 s after SIGINT; its threads:\n"
                                     + err.decode(errors="replace")[-8000:]) from None
    finally:
        if proc.poll() is None:
            proc.kill()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out.decode(), err.decode())


def _open_writer(fifo: Path, proc: subprocess.Popen) -> io.BufferedWriter:
    """The FIFO's write end, once the command has opened it to read (never blocks: a command
    that exits first fails the test instead of hanging it)."""
    for _ in range(2400):  # at most about two minutes
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError:  # ENXIO: no reader yet
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
    else:
        pytest.fail("the command never opened the FIFO")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "wb")


SLOW = pytest.mark.slow  # a real process each: about 3 s


@pytest.mark.parametrize("argv", [
    ["validate", "feed.jsonl"],
    pytest.param(["validate", "feed.jsonl", "--format", "json"], marks=SLOW),
    pytest.param(["batch", "feed.jsonl", "--map", str(CARTPOLE_MAP), "-o", "out.npz"],
                 marks=SLOW),
    pytest.param(["show", "feed.jsonl", "--episode", "not-there"], marks=SLOW),
], ids=["validate", "validate --format json", "batch -o", "show"])
def test_ctrl_c_is_one_line_and_exit_130(tmp_path, argv) -> None:
    old = b"the previous good output\n"
    for name in ("out.npz", "out.json"):
        (tmp_path / name).write_bytes(old)
    done = _interrupt_mid_run(tmp_path, argv)
    assert (done.returncode, done.stderr) == (130, "interrupted\n"), done
    assert done.stdout == ""
    assert (tmp_path / "out.npz").read_bytes() == old and (tmp_path / "out.json").read_bytes() == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["feed.jsonl", "out.json", "out.npz"]


def test_ctrl_c_while_an_output_is_written_leaves_the_previous_file(tmp_path, monkeypatch,
                                                                     capsys) -> None:
    """The interrupt lands inside numpy's write of the .npz: the temporary file goes, the old
    .npz stays, the command says `interrupted` and exits 130."""
    from gyre_contract.cli import main

    target = tmp_path / "b.npz"
    np.savez(target, old=np.arange(3))
    before = target.read_bytes()

    def interrupted_write_array(member, array, **kwargs):
        member.write(b"\x93NUMPY half an array")
        raise KeyboardInterrupt

    monkeypatch.setattr(np.lib.format, "write_array", interrupted_write_array)
    handler = signal.getsignal(signal.SIGINT)
    try:
        main(["batch", str(ROLLOUTS), "--map", str(CARTPOLE_MAP), "-o", str(target)])
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C left the command as a KeyboardInterrupt (a traceback)")
    except SystemExit as exit_:
        assert exit_.code == 130 and capsys.readouterr().err == "interrupted\n"
        # a second Ctrl-C cannot cut the exit short
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        # as the command leaves it, this test process and every command a later test starts
        # (an ignored signal is inherited) would ignore Ctrl-C
        signal.signal(signal.SIGINT, handler)
    assert target.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["b.npz"]
