"""`ubepsim query`: Polars SQL over a dataset, printed or written; and the queries of
docs/sweeps.md, run from the documentation itself, SQL and Polars Python alike."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

from conftest import run_cli, write_grid
from ubepsim.sweep.plot import RESULTS_COLUMNS

ROOT = Path(__file__).resolve().parent.parent
QUERY_GRID = """\
[sweep]
name = "queries"
out = "results/quickstart"
filter = "protocol = 'ubep' OR cumsum_cores = 4"

[grid]
ranks = [4, 8, 16]
batch = [4, 16]
topk = 2
hidden = 64
cores = 8
cumsum_cores = [1, 2, 4]
protocol = ["bsp", "ubep"]
sync = ["sw", "sp"]
schedule = ["expert_block", "homogenized"]
routing = ["uniform", "hot"]
hot_experts = 2
"""
QUERY_SIZE = 3 * 2 * 2 * 2 * 2 * (3 + 1)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    """A dataset at results/quickstart below a fresh directory, as the documentation names it."""
    root = tmp_path_factory.mktemp("queries")
    grid = write_grid(root, QUERY_GRID)
    out = root / "results" / "quickstart"
    assert run_cli("sweep", grid, "--out", out, "-q")[0] == 0
    return out


def test_query_prints_the_answer_as_a_table(dataset):
    code, stdout, _ = run_cli("query", dataset, "SELECT protocol, count(*) AS n FROM results "
                              "GROUP BY protocol ORDER BY protocol")
    assert code == 0
    lines = stdout.splitlines()
    assert lines[0].startswith("┌") and lines[-1] == "2 rows"
    assert re.search(r"│ bsp +┆ 48 +│", stdout) and re.search(r"│ ubep +┆ 144 +│", stdout)
    code, stdout, _ = run_cli("query", dataset, "SELECT count(*) AS n FROM results")
    assert code == 0 and stdout.splitlines()[-1] == "1 row"
    # every column of a wide answer, its name whole
    code, stdout, _ = run_cli("query", dataset, "SELECT * FROM results LIMIT 2")
    header = stdout.splitlines()[1]
    assert code == 0 and [c.strip() for c in header.strip("│").split("┆")] == \
        pl.scan_parquet(f"{dataset}/*.parquet").collect_schema().names()


def test_query_reads_a_single_part_or_a_glob(dataset):
    part = sorted(dataset.glob("*.parquet"))[0]
    for target in (part, dataset / "*.parquet"):
        code, stdout, _ = run_cli("query", target, "SELECT count(*) AS n FROM results")
        assert code == 0 and f"{QUERY_SIZE}" in stdout


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_query_writes_parquet_or_csv(dataset, tmp_path, suffix):
    sql = ("SELECT ranks, batch, avg(latency_us) AS latency_us FROM results "
           "GROUP BY ranks, batch ORDER BY ranks, batch")
    target = tmp_path / f"answer{suffix}"
    code, stdout, _ = run_cli("query", dataset, sql, "--out", target)
    assert code == 0 and stdout == ""
    answer = pl.read_parquet(target) if suffix == ".parquet" else pl.read_csv(target)
    expected = (pl.scan_parquet(dataset / "*.parquet").group_by("ranks", "batch")
                .agg(pl.col("latency_us").mean()).sort("ranks", "batch").collect())
    assert answer.height == 6
    assert answer["latency_us"].to_list() == pytest.approx(expected["latency_us"].to_list())


@pytest.mark.parametrize("args, key, fragment", [
    (("SELEC * FROM results",), "SQL", ""),
    (("SELECT nope FROM results",), "SQL", "nope"),
    (("SELECT * FROM elsewhere",), "SQL", "elsewhere"),
    (("SELECT * FROM results", "--out", "answer.json"), "--out", ".parquet or .csv"),
    (("SELECT * FROM results", "--out", "/no/such/dir/a.csv"), "--out", "/no/such/dir does not"),
    (("SELECT * FROM results", "--rows", 0), "--rows", "at least 1, or -1 for all"),
    (("SELECT * FROM results", "--rows", -5), "--rows", "at least 1, or -1 for all"),
])
def test_bad_queries_exit_2(dataset, args, key, fragment):
    code, _, stderr = run_cli("query", dataset, *args)
    assert code == 2 and stderr.startswith(f"error: {key}: ") and fragment in stderr


def test_missing_or_empty_dataset_exits_2(tmp_path):
    code, _, stderr = run_cli("query", tmp_path / "absent", "SELECT 1 FROM results")
    assert code == 2 and "DATASET" in stderr and "does not exist" in stderr
    code, _, stderr = run_cli("query", tmp_path, "SELECT 1 FROM results")
    assert code == 2 and "holds no Parquet files" in stderr
    code, _, stderr = run_cli("query", tmp_path / "*.parquet", "SELECT 1 FROM results")
    assert code == 2 and stderr.startswith(f"error: DATASET: {tmp_path}/*.parquet matches no")
    (tmp_path / "notes.txt").write_text("not a table\n")
    code, _, stderr = run_cli("query", tmp_path / "notes.txt", "SELECT 1 FROM results")
    assert code == 2 and stderr.startswith(f"error: DATASET: {tmp_path}/notes.txt is not a Parq")


def test_an_empty_name_or_files_of_two_tables_exit_2(dataset, tmp_path):
    code, _, stderr = run_cli("query", "", "SELECT 1 FROM results")
    assert code == 2 and stderr.startswith("error: DATASET: is empty")
    mixed = tmp_path / "mixed"   # no sweep parts: every Parquet file is read, so all must agree
    mixed.mkdir()
    part = sorted(dataset.glob("*.parquet"))[0]
    (mixed / "results.parquet").write_bytes(part.read_bytes())
    pl.DataFrame({"x": [1]}).write_parquet(mixed / "zz.parquet")
    code, _, stderr = run_cli("query", mixed, "SELECT count(*) FROM results")
    assert code == 2 and stderr.startswith(f"error: DATASET: {mixed}/zz.parquet and {mixed}/"
                                           f"results.parquet differ in their columns")


def copy_parts(dataset: Path, target: Path) -> Path:
    target.mkdir()
    for part in dataset.glob("part-*.parquet"):
        (target / part.name).write_bytes(part.read_bytes())
    return target


def test_a_query_over_a_sweep_directory_reads_only_its_parts(dataset, tmp_path):
    copy = copy_parts(dataset, tmp_path / "copy")
    count = "SELECT protocol, count(*) AS n FROM results GROUP BY protocol ORDER BY protocol"
    # An answer written into the dataset's own directory, then a query over the directory
    code, _, stderr = run_cli("query", copy, "SELECT * FROM results WHERE protocol = 'ubep'",
                              "--out", copy / "ubep.parquet")
    assert code == 0 and stderr == ""
    pl.DataFrame({"x": [1]}).write_parquet(copy / "other.parquet")   # and a foreign table
    code, _, stderr = run_cli("query", copy, count, "--out", tmp_path / "n.parquet")
    assert code == 0
    assert pl.read_parquet(tmp_path / "n.parquet").rows() == [("bsp", 48), ("ubep", 144)]
    assert stderr == (f"warning: {copy}: ignored 2 Parquet file(s) that are not sweep parts "
                      f"(other.parquet, ubep.parquet); give a file's own path to read it\n")
    # A directory without parts is still read whole
    loose = tmp_path / "loose"
    loose.mkdir()
    (copy / "ubep.parquet").rename(loose / "ubep.parquet")
    code, stdout, stderr = run_cli("query", loose, "SELECT count(*) AS n FROM results")
    assert code == 0 and stderr == "" and re.search(r"│ 144 +│", stdout)


def test_a_partial_sweep_with_a_stray_file_gives_both_warnings(tmp_path):
    partial = tmp_path / "partial"
    grid = write_grid(tmp_path, QUERY_GRID)
    assert run_cli("sweep", grid, "--out", partial, "--part-rows", 50, "-q")[0] == 0
    parts = sorted(partial.glob("*.parquet"))
    parts[1].rename(partial / "kept.parquet")
    code, _, stderr = run_cli("query", partial, "SELECT count(*) AS n FROM results",
                              "--out", tmp_path / "n.csv")
    assert code == 0 and pl.read_csv(tmp_path / "n.csv")["n"].to_list() == [QUERY_SIZE - 50]
    lines = stderr.splitlines()
    assert len(lines) == 2 and all(line.startswith("warning: ") for line in lines)
    assert "ignored 1 Parquet file(s)" in lines[0] and "(kept.parquet)" in lines[0]
    assert f"holds {QUERY_SIZE - 50} of the {QUERY_SIZE} rows of its grid" in lines[1]


@pytest.mark.parametrize("sql, fragment", [
    ("SELECT batch, batch FROM results", "duplicate output name 'batch'; give each column its "
                                         "own name with AS"),
    ("SELECT * FROM results WHERE batch = 'abc'", "cannot compare string with numeric type"),
    ("SELECT * FROM results WHERE protocol > 3", "cannot compare string with numeric type"),
    ("SELECT protocol, count(*) FROM results GROUP BY protocol HAVING count(*) > 'x'",
     "cannot compare string with numeric type"),
    ("SELECT regexp_like(protocol, '(') FROM results", "regex parse error: unclosed group"),
    ("SELECT * FROM read_parquet('/etc/passwd')", "parquet"),
    ("SELECT * FROM read_parquet('/no/such/file.parquet')", "/no/such/file.parquet"),
    ("INSERT INTO results VALUES (1)", "INSERT changes a table; a query only reads"),
    ("  delete FROM results", "DELETE changes a table; a query only reads"),
    ("DROP TABLE results", "DROP changes a table; a query only reads: give a SELECT"),
])
def test_a_mistake_in_the_sql_exits_2_with_one_line(dataset, sql, fragment):
    code, stdout, stderr = run_cli("query", dataset, sql)
    assert code == 2 and stdout == "", stderr
    assert stderr.startswith("error: SQL: ") and fragment in stderr
    assert stderr.count("\n") == 1 and stderr.endswith("\n")


def test_nested_columns_go_to_parquet_not_csv(dataset, tmp_path):
    sql = ("SELECT protocol, array_agg(batch) AS batches FROM results GROUP BY protocol "
           "ORDER BY protocol")
    code, _, stderr = run_cli("query", dataset, sql, "--out", tmp_path / "nested.csv")
    assert code == 2 and stderr.count("\n") == 1
    assert stderr.startswith("error: --out: CSV cannot hold column batches")
    assert "write FILE.parquet instead" in stderr
    assert list(tmp_path.iterdir()) == []
    code, _, stderr = run_cli("query", dataset, sql, "--out", tmp_path / "nested.parquet")
    assert code == 0, stderr
    assert [len(b) for b in pl.read_parquet(tmp_path / "nested.parquet")["batches"]] == [48, 144]


def test_a_query_over_an_interrupted_sweep_warns_and_still_answers(dataset, tmp_path):
    partial = tmp_path / "partial"
    grid = write_grid(tmp_path, QUERY_GRID)
    assert run_cli("sweep", grid, "--out", partial, "--part-rows", 50, "-q")[0] == 0
    sorted(partial.glob("*.parquet"))[1].unlink()
    code, stdout, stderr = run_cli("query", partial, "SELECT count(*) AS n FROM results",
                                   "--out", tmp_path / "n.csv")
    assert code == 0 and stdout == ""
    assert "warning: " in stderr and f"of the {QUERY_SIZE} rows of its grid" in stderr
    assert run_cli("query", dataset, "SELECT count(*) AS n FROM results")[2] == ""


@pytest.fixture(scope="module")
def combine_dataset(dataset) -> Path:
    """The ready combine grid's results at results/combine, beside the quick start's (each
    documented query names the dataset it reads)."""
    out = dataset.parent / "combine"
    assert run_cli("sweep", ROOT / "sweeps" / "combine.toml", "--out", out, "-q")[0] == 0
    return out


def documented_queries() -> list[tuple[str, str]]:
    """(SQL, Polars Python) pairs from the sweep documentation, in order of appearance."""
    text = (ROOT / "docs" / "sweeps.md").read_text()
    sql = [b for b in re.findall(r"```sql\n(.*?)```", text, re.S) if "FROM results" in b]
    python = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "answer = " in b]
    assert len(sql) == len(python) == 4
    return list(zip(sql, python))


@pytest.mark.parametrize("index", range(4))
def test_documented_queries_run_and_agree(dataset, combine_dataset, monkeypatch, index):
    sql, python = documented_queries()[index]
    over = combine_dataset if "results/combine" in python else dataset
    code, stdout, stderr = run_cli("query", over, sql, "--out", dataset.parent / "a.parquet")
    assert code == 0, stderr
    by_sql = pl.read_parquet(dataset.parent / "a.parquet")
    monkeypatch.chdir(dataset.parent.parent)
    scope: dict = {}
    exec(python, scope)  # the documentation's own code, on a dataset it names
    by_polars = scope["answer"]
    assert by_sql.height > 0
    assert by_polars.columns == by_sql.columns
    assert by_polars.equals(by_sql) or all(
        by_polars[c].to_list() == pytest.approx(by_sql[c].to_list()) if by_sql[c].dtype.is_float()
        else by_polars[c].to_list() == by_sql[c].to_list() for c in by_sql.columns)


def test_an_earlier_versions_results_are_named_so_not_called_no_results(tmp_path):
    # 0.9.0 wrote cumsum_aivs where this version writes cumsum_cores: a figure that needs the
    # column says which version's results these are; a file without it is just not results
    old = {"cumsum_cores": "cumsum_aivs", "cores": "aivs"}
    pl.DataFrame({old.get(c, c): [1] for c in RESULTS_COLUMNS}).write_parquet(
        tmp_path / "old.parquet")
    code, _, err = run_cli("plot", tmp_path / "old.parquet", "--kind", "heatmap", "--out",
                           tmp_path / "h.png")
    assert code == 2 and "but aivs: an earlier version's results (aivs is now cores" in err
    pl.DataFrame({"ranks": [16]}).write_parquet(tmp_path / "old.parquet")
    code, _, err = run_cli("plot", tmp_path / "old.parquet", "--kind", "heatmap", "--out",
                           tmp_path / "h.png")
    assert code == 2 and "earlier version" not in err and not (tmp_path / "h.png").exists()
