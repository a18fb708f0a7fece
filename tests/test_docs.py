"""The repository stands on its own: the README stays short, every link in the docs resolves to a
file of the repository, no file refers outside the repository, and the contract has its sections.

Files are walked in Python (not `git ls-files`), so an untracked file is checked too.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest
from ray_local import start_ray, stop_ray

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
MAX_README_BYTES = 15 * 1024

# Built from parts so that this file does not match its own patterns.
OUTSIDE = re.compile("|".join([re.escape("../" + "shared"), re.escape("research" + "/"),
                               re.escape("/" + "work" + "/"),
                               r"(?i:\b" + "issue" + r"\s+#?\d+)"]))
CHECKED_DIRS = ("gyre_contract", "tests", "docs", "examples", "benchmarks")
CHECKED_FILES = ("README.md", "CHANGELOG.md", "pyproject.toml")
TEXT_SUFFIXES = frozenset({".py", ".md", ".toml", ".json", ".jsonl", ".txt", ".cfg", ".ini",
                           ".yml", ".yaml", ".sh", ".csv"})
SKIPPED_DIRS = frozenset({"__pycache__", ".pytest_cache", ".ruff_cache", ".git", "node_modules"})
VENDORED_MARKERS = ("LICENSE", "LICENSE.md", "LICENSE.txt", "COPYING")
"""A folder under tests/data holding one of these is a vendored third-party copy, not ours."""

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")



def markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def _vendored(path: Path) -> bool:
    data = ROOT / "tests" / "data"
    if data not in path.parents:
        return False
    for folder in path.parents:
        if folder == data:
            return False
        if any((folder / marker).is_file() for marker in VENDORED_MARKERS):
            return True
    return False


def checked_files() -> Iterator[Path]:
    """Every text file of the repository's own code, tests, docs, examples and benchmarks."""
    for name in CHECKED_FILES:
        yield ROOT / name
    for top in CHECKED_DIRS:
        for path in sorted((ROOT / top).rglob("*")):
            if (path.is_file() and path.suffix in TEXT_SUFFIXES
                    and not SKIPPED_DIRS.intersection(path.relative_to(ROOT).parts)
                    and not _vendored(path)):
                yield path


def prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) of the Markdown outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|__", "", heading).strip().lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return kept.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if match:
            base = anchor(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            out.add(base if count == 0 else f"{base}-{count}")
    return out


def relative_links(path: Path) -> Iterator[tuple[int, str]]:
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
            if not re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
                yield number, target


def link_cases() -> list:
    cases = []
    for doc in markdown_files():
        for number, target in relative_links(doc):
            name = f"{doc.relative_to(ROOT)}:{number}:{target}"
            cases.append(pytest.param(doc, target, id=name))
    return cases


def test_readme_is_at_most_15_kb():
    size = README.stat().st_size
    assert size <= MAX_README_BYTES, f"README.md is {size} bytes, more than {MAX_README_BYTES}"


@pytest.mark.parametrize(("doc", "target"), link_cases())
def test_relative_link_resolves_inside_the_repository(doc: Path, target: str):
    file_part, _, fragment = target.partition("#")
    resolved = (doc.parent / file_part).resolve() if file_part else doc
    assert resolved == ROOT or ROOT in resolved.parents, f"{target} points outside the repository"
    assert resolved.exists(), f"{target}: no such file {resolved.relative_to(ROOT)}"
    if fragment and resolved.suffix == ".md":
        assert fragment in anchors(resolved), \
            f"{target}: no heading with anchor #{fragment} in {resolved.relative_to(ROOT)}"


def test_the_docs_have_links_to_check():
    """The link test must not pass by finding nothing."""
    assert len(link_cases()) >= 20


def outside_cases() -> list:
    cases = []
    for path in checked_files():
        rel = path.relative_to(ROOT).as_posix()
        cases.append(pytest.param(path, id=rel))
    return cases


@pytest.mark.parametrize("path", outside_cases())
def test_no_file_refers_outside_the_repository(path: Path):
    text = path.read_text(encoding="utf-8", errors="replace")
    hits = [f"line {text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
            for m in OUTSIDE.finditer(text)]
    assert not hits, f"{path.relative_to(ROOT)} refers outside the repository: {hits}"


def test_the_walk_covers_the_package_tests_and_docs():
    rels = {p.relative_to(ROOT).as_posix() for p in checked_files()}
    for expected in ("gyre_contract/__init__.py", "tests/test_docs.py", "docs/contract.md",
                     "README.md", "pyproject.toml", "examples/cartpole_map.json"):
        assert expected in rels


def test_vendored_folders_are_recognised_by_their_licence(tmp_path: Path, monkeypatch):
    root = tmp_path
    suite = root / "tests" / "data" / "suite"
    (suite / "tests").mkdir(parents=True)
    (suite / "LICENSE").write_text("licence")
    ours = root / "tests" / "data" / "rollouts"
    ours.mkdir(parents=True)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", root)
    assert _vendored(suite / "tests" / "case.json")
    assert not _vendored(ours / "bad.jsonl")


def test_outside_references_are_caught():
    for text in ("see " + "../" + "shared" + "/CONTRACT.md", "research" + "/perf.md",
                 "Path('/" + "work" + "/" + "shared" + "/x')", "as in " + "Issue" + " #12"):
        assert OUTSIDE.search(text), text
    assert not OUTSIDE.search("docs/contract.md §3 and the workers/ folder, an issue of 2 kinds")


def test_anchors_follow_github():
    assert anchor("3. Rollout step record, v1") == "3-rollout-step-record-v1"
    assert anchor("Stage 1: the sampler alone") == "stage-1-the-sampler-alone"
    assert anchor("`GYRE_FAST_PATHS=0`") == "gyre_fast_paths0"
    assert anchor("Bad input → what you get") == "bad-input--what-you-get"


MAX_CONTRACT_BYTES = 35 * 1024
"""The specification stays a specification: how-to lives in the guides it links to."""


def test_contract_has_sections_1_to_10_and_stays_short():
    text = (DOCS / "contract.md").read_text(encoding="utf-8")
    numbers = [int(m.group(1)) for m in re.finditer(r"^## (\d+)\. ", text, re.M)]
    assert numbers[:10] == list(range(1, 11)), numbers
    assert numbers == list(range(1, len(numbers) + 1)), numbers
    assert re.search(r"^## 10\. LLM online RL \(v1\.1\)$", text, re.M)
    assert "(llm.md)" in contract_section(10)
    size = len(text.encode("utf-8"))
    assert size <= MAX_CONTRACT_BYTES, f"docs/contract.md is {size} bytes, more than {MAX_CONTRACT_BYTES}"


RULE_NAME = re.compile(r"`((?:field|step|episode|batch)\.[a-z_]+)`")


def test_every_registered_rule_is_in_the_contract_and_only_those():
    from gyre_contract import TokenBatch, TrainBatch  # noqa: F401  (their modules register the rules)
    from gyre_contract.core._registry import all_rules

    registered = {rule.name for rule in all_rules()}
    documented = set(RULE_NAME.findall((DOCS / "contract.md").read_text(encoding="utf-8")))
    assert registered - documented == set(), "rules missing from docs/contract.md §3-§4"
    assert documented - registered == set(), "docs/contract.md names rules that do not exist"


def doc_section(page: str, heading: str) -> str:
    """The `## ` section of docs/`page` whose heading starts with the regex `heading`, up to the
    next `## ` heading."""
    text = (DOCS / page).read_text(encoding="utf-8")
    start = re.search(rf"^## {heading}", text, re.M)
    assert start, f"docs/{page} has no section {heading}"
    end = re.search(r"^## ", text[start.end():], re.M)
    return text[start.start(): start.end() + end.start() if end else len(text)]


def contract_section(number: int) -> str:
    return doc_section("contract.md", rf"{number}\. ")


def test_the_roles_of_section_2_are_the_codes():
    from gyre_contract.schema._roles import ROLES

    paragraph = contract_section(2).split("**role**", 1)[1].split("\n\n", 1)[0]
    listed = re.findall(r"`([a-z_]+)`", paragraph)
    assert listed == list(ROLES), "docs/contract.md §2 lists other roles than schema/roles.py"


def test_every_diff_warning_the_code_emits_is_in_section_6_and_only_those():
    emitted = set()
    for path in (ROOT / "gyre_contract").rglob("*.py"):
        emitted |= set(re.findall(r"DiffWarning\(\s*\"([a-z_]+)\"", path.read_text(encoding="utf-8")))
    assert len(emitted) >= 10, emitted  # the pattern still finds the warnings
    table = contract_section(6).split("**Warnings**", 1)[1].split("**Output.**", 1)[0]
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", table, re.M))
    assert emitted - documented == set(), "warnings missing from docs/contract.md §6"
    assert documented - emitted == set(), "docs/contract.md §6 names warnings the code never emits"


def test_every_cli_command_has_its_exit_codes_in_section_9_and_every_flag_in_the_api():
    """Each command has its row in the exit-code table of contract.md §9, and its row of the
    command table in api.md names each of its flags (by any of its spellings: `-o` or `--out`)."""
    from gyre_contract.cli._app import COMMANDS, build_parser

    section = contract_section(9)
    reference = doc_section("api.md", "Command line$")
    subparsers = next(a for a in build_parser()._actions if a.dest == "command")
    assert set(subparsers.choices) == set(COMMANDS)
    for name, parser in subparsers.choices.items():
        assert re.search(rf"^\| `{name}` \|", section, re.M), \
            f"command {name} has no row in docs/contract.md §9"
        rows = [line for line in reference.splitlines() if line.startswith(f"| `{name} ")
                or line.startswith(f"| `{name}`")]
        assert rows, f"command {name} has no row in docs/api.md's command line table"
        text = "\n".join(rows)
        for action in parser._actions:
            flags = [f for f in action.option_strings if f not in ("-h", "--help")]
            if flags:
                assert any(re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", text) for f in flags), \
                    f"gyre-contract {name} {flags[-1]} is not in its row of docs/api.md"


# -- docs/architecture.md records the structure ------------------------------------------------

def structure_row(label: str) -> tuple[str, str]:
    """(before, after) of a row of the table in docs/architecture.md "The structure in numbers"."""
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    found = re.search(rf"^\| {re.escape(label)} \| (.*) \| (.*) \|$", text, re.M)
    assert found, f"docs/architecture.md has no row {label!r}"
    return found.group(1), found.group(2)


def test_architecture_states_todays_public_names_and_token_row_lines():
    import importlib.util

    spec = importlib.util.spec_from_file_location("structure", ROOT / "tests" / "structure.py")
    assert spec is not None and spec.loader is not None
    structure = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(structure)
    now = structure.measure(ROOT)
    assert structure_row("public names (top level / unique across the package)")[1] == \
        f"{now['public_names_top_level']} / {now['public_names_unique']}"
    assert structure_row('lines spelling token rows (`"step"` on a line about rows)')[1] == \
        f"{now['rows_step_lines']} in {len(now['rows_step_modules'])} modules"
    assert structure_row("public modules (no `_` in the dotted path)")[1] == \
        str(now["public_modules"])


# -- the Python snippets of the README and docs run --------------------------------------------

NO_RUN = re.compile(r"^<!--\s*no-run:\s*(.+?)\s*-->$")
"""An HTML comment on the line right before a fence: that block cannot run on its own."""
MAX_NO_RUN = 4
"""How many blocks may be marked: a snippet that needs a user's file or trainer is the exception."""
CLI_LINE = re.compile(r"^\$ gyre-contract (.+)$")


def code_blocks(path: Path) -> list[tuple[int, str, str, str | None]]:
    """(line, language, code, no-run reason or None) of every fenced block of `path`."""
    blocks = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        match = re.match(r"^```(\w*)\s*$", lines[i])
        if not match:
            i += 1
            continue
        start, language = i, match.group(1)
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        marker = NO_RUN.match(lines[start - 1].strip()) if start else None
        blocks.append((start + 1, language, "\n".join(lines[start + 1:end]) + "\n",
                       marker.group(1) if marker else None))
        i = end + 1
    return blocks


def runnable_pages() -> list[Path]:
    return [p for p in markdown_files() if any(lang == "python" for _, lang, _, _ in code_blocks(p))]


def run_cli_block(code: str, where: str) -> None:
    """The `$ gyre-contract ...` lines of a console block, in process, each expected to exit 0."""
    import io
    import shlex

    from gyre_contract.cli._app import run

    for line in code.splitlines():
        match = CLI_LINE.match(line.strip())
        if match:
            out, err = io.StringIO(), io.StringIO()
            code = run(shlex.split(match.group(1)), stdout=out, stderr=err)
            assert code == 0, f"{where}: `{line}` exited {code}: {err.getvalue()}{out.getvalue()}"


EXTRAS = frozenset({"ray", "gymnasium", "pyarrow", "matplotlib"})
"""Optional extras: a page whose snippets need one that is not installed is skipped."""


def run_python_block(code: str, where: str, namespace: dict[str, object]) -> None:
    try:
        # dont_inherit: a snippet runs as in a user's file, without this module's
        # `from __future__ import annotations` (a pinned model's fields are then real types)
        exec(compile(code, where, "exec", dont_inherit=True), namespace)
    except ModuleNotFoundError as err:
        if (err.name or "").split(".")[0] in EXTRAS:
            pytest.skip(f"{where}: extra {err.name} is not installed")
        raise


@pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*")
# the scale-out page starts a local Ray cluster: seconds, so it runs with the slow cases
@pytest.mark.parametrize("page", [pytest.param(p, marks=pytest.mark.slow) if p.name == "scale-out.md" else p
                                  for p in runnable_pages()], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_python_snippets_run(page: Path, tmp_path: Path, monkeypatch, request):
    """Every ```python block of the page runs, in order, in one fresh namespace, in a temporary
    working directory holding a copy of `examples/`, `schemas/` and the peer schemas (paths are
    from the repository's root). `$ gyre-contract` lines of console blocks run too, in order, as
    later snippets read what they write (`map.json`). A DeprecationWarning fails the test
    (warnings are errors)."""
    import shutil
    import warnings

    from gyre_contract.trainer._ops import known_ops, unregister_op

    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    shutil.copytree(ROOT / "tests" / "data" / "peers", tmp_path / "tests" / "data" / "peers")
    shutil.copytree(ROOT / "schemas", tmp_path / "schemas")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(ROOT))
    namespace: dict[str, object] = {"__name__": "__snippet__"}
    if any("import ray" in code for _, _, code, _ in code_blocks(page)):
        # a Ray of the page's own, its workers started in this folder (the snippets' relative
        # paths); the snippet's `ray.data` joins it
        stop_ray()
        request.getfixturevalue("_ray_stopped_at_the_end")
        start_ray()
    ran = 0
    ops_before = set(known_ops())
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # a snippet must not use an old name
        warnings.filterwarnings("ignore", category=DeprecationWarning, module="ray")
        try:
            for line, language, code, no_run in code_blocks(page):
                where = f"{page.relative_to(ROOT)}:{line}"
                if no_run is not None:
                    continue
                if language == "python":
                    run_python_block(code, where, namespace)
                    ran += 1
                elif language == "console":
                    run_cli_block(code, where)
        finally:
            for name in set(known_ops()) - ops_before:  # a page's custom ops (field-map.md)
                unregister_op(name)
            stop_ray()
    assert ran


def test_few_snippets_are_marked_no_run():
    """A block that cannot run is marked `<!-- no-run: why -->`; the marks stay few, and each
    says why."""
    marked = [(p.relative_to(ROOT).as_posix(), line, why) for p in markdown_files()
              for line, _, _, why in code_blocks(p) if why is not None]
    assert len(marked) <= MAX_NO_RUN, marked
    assert all(len(why) >= 10 for _, _, why in marked), marked


def test_snippet_blocks_are_found():
    """The snippet test must not pass by finding nothing."""
    python = [b for p in markdown_files() for b in code_blocks(p) if b[1] == "python"]
    assert len(python) >= 15 and len(runnable_pages()) >= 5
