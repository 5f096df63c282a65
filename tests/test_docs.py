"""The documentation is true: docs/reference.md is what the code generates, every link lands,
the mechanism table names functions that exist, every documented command runs as written (the
slow ones are checked for their flags), and every Python block runs."""

from __future__ import annotations

import importlib
import re
import shlex
from pathlib import Path

import pytest

from conftest import run_cli
from ubepsim.docs import reference

ROOT = Path(__file__).resolve().parent.parent
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md")
SEEDS = "$(seq -s, 0 19)"   # the one shell expansion the documented commands use
# Documented commands too slow for the suite, by their first words: their flags are checked, and
# what they do is tested elsewhere on smaller inputs.
SLOW = {
    "calibrate --paper": "the paper's fit takes minutes (tests/test_calibrate.py has its set-up)",
    "validate": "tests/test_validate.py runs it",
    "tune --ranks 64,128,256": "hundreds of configurations per workload (tests/test_tune.py)",
    "tune --grid": "the fig14 grid's 4,800 configurations x 16 group sizes",
    "sweep sweeps/fig14_cumsum_groups.toml": "4,800 configurations up to 256 ranks",
    "plot results/fig14_cumsum_groups": "needs the fig14 sweep",
}


def fenced(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.S | re.M)


def documented_commands() -> list[tuple[str, list[str]]]:
    """(doc, the arguments after `ubepsim`) of every command in its ```sh blocks, in order;
    a line may chain commands with &&."""
    found = []
    for doc in DOCS:
        for block in fenced(doc.read_text(), "sh"):
            for line in block.splitlines():
                for command in line.split(" && "):
                    command = command.replace(SEEDS, ",".join(map(str, range(20))))
                    args = shlex.split(command, comments=True)
                    if args[:1] == ["ubepsim"]:
                        found.append((doc.name, args[1:]))
    return found


def python_blocks() -> list[tuple[str, str]]:
    return [(doc.name, block) for doc in DOCS for block in fenced(doc.read_text(), "python")]


def test_the_reference_is_what_the_code_generates():
    """Regenerate with `python -m ubepsim.docs > docs/reference.md` after changing a help text."""
    assert (ROOT / "docs" / "reference.md").read_text() == reference()


def _anchors(doc: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    headings = re.findall(r"^#+ (.*)$", doc.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_every_link_lands(doc):
    for link in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
        if link.startswith("http"):
            continue
        path, _, anchor = link.partition("#")
        target = (doc.parent / path).resolve() if path else doc
        assert target.exists(), link
        assert not anchor or anchor in _anchors(target), link


def _mechanisms() -> list[list[str]]:
    text = (ROOT / "docs" / "model.md").read_text()
    table = text.split("| paper mechanism |")[1].split("\n\n")[0]
    return [[c.strip() for c in row.strip("|").split("|")] for row in table.splitlines()[2:]]


def test_the_model_names_every_parameter_that_is_not_always_read():
    """docs/model.md's table of parameters that are not read holds exactly params.GATED's (and
    reference.md, generated, says where each is read)."""
    from ubepsim.model.params import GATED

    text = (ROOT / "docs" / "model.md").read_text()
    table = text.split("## Parameters that are not read")[1].split("\n\n")[2]
    named = re.findall(r"`(\w+)`", "".join(row.split("|")[1] for row in table.splitlines()[2:]))
    assert sorted(named) == sorted(GATED)


def test_the_protocols_table_holds_the_registry():
    """docs/model.md's table of mechanisms names each of protocols.Mechanisms once, in order,
    and an enum's cell names the value each protocol's module gives it."""
    from ubepsim.kernels import layout, protocols

    text = (ROOT / "docs" / "model.md").read_text()
    table = text.split("| mechanism | what it does |")[1].split("\n\n")[0]
    header, _, *lines = table.splitlines()
    assert [c.strip() for c in header.strip("|").split("|")] == \
        [f"`{name}`" for name in protocols.NAMES]
    rows = [[c.strip() for c in row.strip("|").split("|")] for row in lines]
    assert [row[0].strip("`") for row in rows] == [f.upper() for f in protocols.Mechanisms._fields]
    names = {getattr(layout, n): n for n in ("RECEIVE_CUMSUM", "RECEIVE_GROUP", "RECEIVE_SLOTS")}
    row = next(r for r in rows if r[0] == "`RECEIVE`")
    assert row[2:] == [f"`{names[protocols.of(p).receive]}`" for p in range(len(protocols.NAMES))]


def test_the_mechanism_table_names_tests_that_exist():
    rows = _mechanisms()
    assert len(rows) >= 20
    for row in rows:
        files = re.findall(r"`(test_\w+\.py)`", row[3])
        assert files and all((ROOT / "tests" / f).exists() for f in files), row[0]


def _named(cell: str, package: str) -> list[tuple[str, object]]:
    """The names a cell of the mechanism table gives, each with what it names: a backticked
    module (`schedule.py`, `protocols/ubep.py`, `protocols/__init__.py`) is imported from
    `package`, and each backticked name after it (`walk`, `Fabric.turn`: dotted, attribute by
    attribute; a dataclass's field counts) is looked up there; None where it is not. Other
    backticked text (`"issued"`) is not a name."""
    found: list[tuple[str, object]] = []
    where = None
    for text in re.findall(r"`([^`]+)`", cell):
        if text.endswith(".py"):
            module = text.removesuffix(".py").removesuffix("__init__").rstrip("/")
            where = importlib.import_module(".".join([package, *module.split("/")] if module
                                                     else [package]))
        elif re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", text):
            assert where is not None, f"`{text}` comes before any module in {cell!r}"
            obj = where
            for part in text.split("."):
                fields = getattr(obj, "__dataclass_fields__", {})
                obj = getattr(obj, part, fields.get(part))
            found.append((text, obj))
    return found


@pytest.mark.parametrize("row", _mechanisms(), ids=lambda row: row[0][:40])
def test_the_mechanism_table_names_functions_that_exist_under_one_name(row):
    """docs/model.md promises, for each mechanism, a function of the kernel and one of the same
    name in the twin: every name of the kernel's cell exists in the kernels/ module it follows,
    every name of the twin's in ubepsim/reference/'s, and the two cells share a name (a
    method's own: `Fabric.turn` is the twin's `turn`)."""
    kernel = _named(row[1], "ubepsim.kernels")
    twin = _named(row[2], "ubepsim.reference")
    missing = [name for name, obj in kernel + twin if obj is None]
    assert not missing, f"{row[0]}: no such function: {missing}"
    assert {n.rsplit(".", 1)[-1] for n, _ in kernel} & {n.rsplit(".", 1)[-1] for n, _ in twin}, \
        f"{row[0]}: the kernel's and the twin's cells share no name"


@pytest.mark.parametrize("doc, args", documented_commands(),
                         ids=lambda x: " ".join(x)[:60] if isinstance(x, list) else x)
def test_every_documented_command_takes_its_flags(doc, args):
    """The command exists and takes every flag it is given (click parses them all before
    --help answers)."""
    code, out, err = run_cli(*args, "--help")
    assert code == 0 and out.startswith("Usage:"), err


# The documented commands and Python blocks run in two parts, each in a working directory of
# its own, each in documentation order: sweeps.md's (its queries and its Python read only what
# its own commands write) in tests/test_docs_sweeps.py, the other documents' here, so that the
# suite's two workers run them side by side.
APART = ("sweeps.md",)


def make_workspace(tmp_path_factory) -> Path:
    """A working directory with the repository's sweeps/, as the documentation assumes, and
    the measurement files fitting.md shows."""
    root = tmp_path_factory.mktemp("documented")
    (root / "sweeps").symlink_to(ROOT / "sweeps")
    measured, relative, sourced = fenced((ROOT / "docs" / "fitting.md").read_text(), "csv")
    (root / "measured.csv").write_text(measured)
    (root / "relative.csv").write_text(relative)
    (root / "sourced.csv").write_text(sourced)
    return root


def run_documented(docs, workspace: Path, kernel_rows) -> dict:
    """Every command of `docs` (names) that is not SLOW, run as written in documentation order,
    then every Python block of theirs: {block: its variables}. A configuration is simulated
    once in the process (conftest.KernelRows): README's `tune --sms` runs some of tune.md's,
    which `validate`'s DeepEP points run too."""
    with kernel_rows.shared(), pytest.MonkeyPatch.context() as mp:
        mp.chdir(workspace)
        for doc, args in documented_commands():
            if doc in docs and not any(" ".join(args).startswith(s) for s in SLOW):
                code, _, err = run_cli(*args)
                assert code == 0, f"{doc}: ubepsim {' '.join(args)}: {err}"
        scopes = {}
        for doc, block in python_blocks():
            if doc in docs:
                scope: dict = {}
                exec(block, scope)   # the documentation's own code
                scopes[block] = scope
    return scopes


@pytest.fixture(scope="module")
def ran(tmp_path_factory, kernel_rows):
    """The documents but APART, run: {Python block: its variables}."""
    return run_documented({d.name for d in DOCS} - set(APART), make_workspace(tmp_path_factory),
                          kernel_rows)


def test_every_documented_python_block_runs(ran):
    # (APART's blocks: tests/test_docs_sweeps.py)
    assert len(ran) == len([b for d, b in python_blocks() if d not in APART]) >= 1
    assert len(python_blocks()) >= 5


def test_the_readme_python_gives_rows_a_frame_and_a_timeline(ran):
    (scope,) = [s for block, s in ran.items() if "simulate_many(" in block and "tl =" in block]
    assert scope["row"]["ranks"] == 64 and scope["row"]["latency_us"] > 0
    assert scope["frame"].height == 18
    assert scope["tl"]["phase"].n_unique() > 1
