"""Grid files: expansion, ranges, zipped groups, filters, and every kind of error."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from conftest import TINY_GRID, TINY_SIZE, run_cli, write_grid
from ubepsim.errors import InputError
from ubepsim.kernels.layout import MAX_TIME
from ubepsim.sweep import expand
from ubepsim.sweep import grid as grid_module
from ubepsim.model.costs import lower, time_bound
from ubepsim.sweep.filters import compile_filter
from ubepsim.sweep.grid import load_grid
from ubepsim.model.params import NAMES

SWEEPS = Path(__file__).resolve().parent.parent / "sweeps"


def grid_of(tmp_path: Path, body: str, sweep: str = 'name = "t"\n') -> Path:
    return write_grid(tmp_path, f"[sweep]\n{sweep}\n{body}")


def test_expansion_is_the_product_in_file_order_seeds_innermost(tmp_path):
    g = load_grid(grid_of(tmp_path, """
        [grid]
        batch = [8, 16]
        protocol = ["bsp", "ubep"]
        """, 'name = "t"\nseeds = [5, 6, 7]'))
    assert g.product == g.size == 12
    assert g.axes == {"batch": 2, "protocol": 2, "seed": 3}
    assert g.points.columns == list(NAMES)
    assert g.points["batch"].to_list() == [8] * 6 + [16] * 6
    assert g.points["protocol"].cast(pl.String).to_list()[:6] == ["bsp"] * 3 + ["ubep"] * 3
    assert g.points["seed"].to_list() == [5, 6, 7] * 4


def test_unset_parameters_take_defaults_experts_follow_ranks_cores_the_profile(tmp_path):
    g = load_grid(grid_of(tmp_path, """
        [grid]
        ranks = [16, 32]
        [profile]
        cores = 24
        """))
    row = g.frame(0, 2).to_dicts()
    assert [r["experts"] for r in row] == [16, 32]
    assert {r["cores"] for r in row} == {24}
    assert {r["sync"] for r in row} == {"sp"} and {r["trace"] for r in row} == {""}
    assert g.profile.cores == 24


def test_a_grid_without_sync_takes_the_profiles_as_run_does(tmp_path):
    """sp where the profile's fabric writes a block whole, dc where it does not (h800 refuses
    sp): a preset's defaults run. A sync axis is kept, and sp refused there as by run."""
    body = """
        [grid]
        ranks = 8
        protocol = ["bsp", "ubep"]
        """
    for profile, sync in (("cm384", "sp"), ("h800", "dc")):
        g = load_grid(grid_of(tmp_path, body, f'name = "t"\nprofile = "{profile}"'))
        assert g.frame(0, g.size)["sync"].cast(pl.String).to_list() == [sync, sync]
    with pytest.raises(InputError, match="sp needs stores the fabric writes whole"):
        load_grid(grid_of(tmp_path, body + 'sync = "sp"\n', 'name = "t"\nprofile = "h800"'))


def test_ranges_include_both_ends_with_steps_and_factors(tmp_path):
    g = load_grid(grid_of(tmp_path, """
        [grid]
        cumsum_cores = { range = [1, 16] }
        batch = { range = [8, 128], factor = 2 }
        hidden = { range = [64, 256], step = 64 }
        hot_share = { range = [0.1, 0.3], step = 0.1 }
        routing = "hot"
        """))
    assert g.axes == {"cumsum_cores": 16, "batch": 5, "hidden": 4, "hot_share": 3,
                      "routing": 1, "seed": 1}
    assert g.points["batch"].unique().sort().to_list() == [8, 16, 32, 64, 128]
    assert g.points["hidden"].unique().sort().to_list() == [64, 128, 192, 256]
    assert g.points["hot_share"].unique().sort().to_list() == [0.1, 0.2, 0.3]


def test_ranges_end_exactly_on_last(tmp_path):
    g = load_grid(grid_of(tmp_path, """
        [grid]
        hot_share = { range = [0.1, 0.7], step = 0.1 }
        batch = { range = [4, 9], factor = 1.5 }
        routing = "hot"
        """))
    assert g.points["hot_share"].unique().sort().to_list()[-1] == 0.7  # not 0.7000000000000001
    assert g.points["batch"].unique().sort().to_list() == [4, 6, 9]


def test_a_grid_holds_at_most_max_points_counted_before_expanding(tmp_path, monkeypatch):
    monkeypatch.setattr(grid_module, "MAX_POINTS", 12)
    body = "[grid]\nbatch = { range = [1, 3] }\nhidden = [64, 128]\n"
    assert load_grid(grid_of(tmp_path, body, 'name = "t"\nseeds = [0, 1]')).size == 12
    path = grid_of(tmp_path, body, 'name = "t"\nseeds = { range = [0, 2] }')
    with pytest.raises(InputError) as e:
        load_grid(path)
    assert e.value.key == "grid" and str(e.value) == (
        f"{path}: grid: 18 points (3 batch x 2 hidden x 3 seed); a grid holds at most 12: "
        "narrow an axis or split the grid into several files")
    with pytest.raises(InputError) as e:
        load_grid(grid_of(tmp_path, "[grid]\nbatch = { range = [1, 13] }\n"))
    assert e.value.key == "grid.batch"
    assert "range [1, 13] has 13 values; a grid holds at most 12 points" in str(e.value)


def test_expansion_in_chunks_gives_the_same_points_and_fingerprint(tmp_path, monkeypatch):
    """The product is expanded and checked a chunk at a time, and only the kept points'
    indices are held: the chunk size changes nothing (bsp's cumsum_cores = 2 points, one
    configuration with its cumsum_cores = 1 points, the default, are dropped across chunks), and any batch is
    the same slice."""
    path = grid_of(tmp_path, "[grid]\nbatch = [8, 16, 32]\ntopk = { range = [1, 8] }\n"
                   "protocol = ['bsp', 'ubep']\ncumsum_cores = [1, 2]\n",
                   'name = "t"\nseeds = [0, 1, 2]\nfilter = "topk % 3 <> 0 OR protocol = \'bsp\'"')
    whole = load_grid(path)
    monkeypatch.setattr(expand, "CHUNK", 7)
    chunked = load_grid(path)
    assert chunked.points.equals(whole.points) and chunked.fingerprint == whole.fingerprint
    assert whole.kept.dtype == np.int64 and whole.size == len(whole.kept)
    assert whole.size == whole.filtered - 3 * 8 * 3 < whole.filtered < whole.product
    for a, b in ((0, 5), (17, 40), (whole.size - 3, whole.size)):
        assert chunked.frame(a, b).equals(whole.points.slice(a, b - a))
    unfiltered = load_grid(grid_of(tmp_path, "[grid]\nbatch = [8, 16]\n", 'name = "t"'))
    assert unfiltered.kept is None and unfiltered.size == unfiltered.product == 2


def test_two_configurations_with_one_config_id_are_refused(tmp_path, monkeypatch):
    """Rows are keyed on config_id, a 63-bit hash: a collision (forced here by a coarser hash)
    must be refused rather than merge two configurations, while points that are one
    configuration (bsp's cumsum_cores) still merge under the same coarse hash when nothing else
    collides."""
    real = expand.stable_id
    monkeypatch.setattr(expand, "stable_id", lambda cols, names: real(cols, names) % 5)
    monkeypatch.setattr(expand, "CHUNK", 3)
    path = grid_of(tmp_path, "[grid]\nbatch = [8, 16, 32]\ntopk = [1, 2]\n")   # six ids in five
    with pytest.raises(InputError) as e:
        load_grid(path)
    assert e.value.key == "config_id" and "collision" in str(e.value)
    assert re.search(r"\((batch|topk) = \d+ and \d+", str(e.value)), str(e.value)
    code, _, err = run_cli("sweep", path, "--out", tmp_path / "out", "--quiet")
    assert code == 2 and "config_id" in err and not (tmp_path / "out").exists()
    # under the coarsest hash (one id for all), bsp's points of three cumsum_cores values are
    # one configuration: kept once, and no collision
    monkeypatch.setattr(expand, "stable_id", lambda cols, names: real(cols, names) * 0)
    gated = load_grid(grid_of(tmp_path, "[grid]\nprotocol = 'bsp'\ncumsum_cores = [1, 2, 3]\n"))
    assert gated.size == 1 and gated.kept.tolist() == [0]


SLOW_PROFILE = "[profile]\negress_gbps = 0.001\ningress_gbps = 0.001\ncore_store_gbps = 0.001\n"


def test_points_whose_times_could_pass_the_kernels_keys_are_refused_before_any_work(tmp_path):
    """On a profile thousands of times too slow, a large point's time bound reaches the
    kernel's MAX_TIME: refused while expanding, naming the point. The grid's corner (every
    size at its largest) is only a first look: a grid whose corner fails but none of whose
    points does runs (ranks and batch move together here, never both large)."""
    path = grid_of(tmp_path, "[grid]\nranks = 64\nbatch = [8, 1024]\ntopk = 8\n"
                   "hidden = 1048576\n" + SLOW_PROFILE)
    with pytest.raises(InputError, match="at ranks = 64, batch = 1024") as e:
        load_grid(path)
    assert e.value.key == "profile" and f"2^{MAX_TIME.bit_length() - 1} cycles" in str(e.value)
    code, _, err = run_cli("sweep", path, "--out", tmp_path / "out", "--quiet")
    assert code == 2 and f"2^{MAX_TIME.bit_length() - 1} cycles" in err and not (tmp_path / "out").exists()
    zipped = grid_of(tmp_path, "[[zip]]\nranks = [2, 64]\nexperts = [8, 64]\nbatch = [1024, 8]\n"
                     "[grid]\ntopk = 8\nhidden = 1048576\n" + SLOW_PROFILE)
    g = load_grid(zipped)
    corner = expand.corner(g.values, g.profile)
    assert corner["ranks"].max() == 64 and corner["batch"].max() == 1024
    assert (time_bound(corner, lower(corner, g.profile)[0]) >= expand.MAX_TIME).all()
    assert g.size == 2


def test_the_corner_bounds_a_die_holding_every_token_where_batches_may_spread(tmp_path):
    """A grid's corner bounds the most tokens a die holds (its memory and time bounds grow with
    it): batch where every die holds batch, ranks x batch where a spread or a trace (which
    carries its own) may give one die more."""
    def most(body):
        g = load_grid(grid_of(tmp_path, "[grid]\nranks = 4\nbatch = 2\ntopk = 2\n" + body))
        return set(expand.corner(g.values, g.profile)["batch_max"].tolist())
    assert most("") == most('batch_spread = "equal"\n') == {2}
    assert most('batch_spread = ["equal", "cv"]\n') == {4 * 2}
    write_trace(tmp_path / "t.parquet", 0)
    assert most('[[zip]]\nrouting = ["uniform", "trace"]\ntrace = ["", "t.parquet"]\n') == \
        {4 * 2}


def _must_not_expand(*args, **kw):
    raise AssertionError("the grid was expanded before its size was refused")


def test_absurd_sizes_are_refused_at_once_by_arithmetic(tmp_path, monkeypatch):
    # each of these used to build its values or its product first: MemoryError or a Rust panic
    top = f"{grid_module.MAX_POINTS:,}"
    cases = [
        ('seeds = { range = [0, 10000000000] }', "", "sweep.seeds",
         f"range [0, 10000000000] has 10,000,000,001 values; a grid holds at most {top} "
         "points: narrow the range or split the grid into several files"),
        ("", "[grid]\nbatch = { range = [1, 4], step = 1e-300 }", "grid.batch",
         "an integer parameter needs integer range ends and steps"),
        ("", "[grid]\nhidden = { range = [1, 1e300], factor = 1.0000001 }", "grid.hidden",
         "range [1, 1e+300]: 1e+300 is above the maximum 16777216"),
        ('seeds = { range = [1, 1000000000000000000], factor = 1.0000001 }', "", "sweep.seeds",
         "range [1, 1000000000000000000] has 414,465,"),
        ("", "[grid]\nhot_share = { range = [0, 1], step = 1e-300 }", "grid.hot_share",
         "range [0, 1] has more than 10^15 values"),
        ('seeds = { range = [0, 999] }', "[grid]\nbatch = { range = [1, 1000] }\n"
         "hidden = { range = [1, 1000] }\ntopk = { range = [1, 16] }", "grid",
         "16,000,000,000 points (1,000 batch x 1,000 hidden x 16 topk x 1,000 seed); a grid "
         f"holds at most {top}: narrow an axis or split the grid into several files"),
    ]
    # refused by counting, before any point is built
    monkeypatch.setattr(grid_module, "expand", _must_not_expand)
    for sweep, body, key, fragment in cases:
        with pytest.raises(InputError) as e:
            load_grid(grid_of(tmp_path, body, f'name = "t"\n{sweep}'))
        assert e.value.key == key and fragment in str(e.value), str(e.value)


def test_zipped_parameters_move_together(tmp_path):
    g = load_grid(grid_of(tmp_path, """
        [grid]
        batch = [8, 16]
        [[zip]]
        ranks = [16, 32, 64]
        experts = [32, 64, 128]
        """))
    assert g.axes == {"batch": 2, "ranks+experts": 3, "seed": 1}
    assert (g.points["experts"] == 2 * g.points["ranks"]).all()


@pytest.mark.parametrize("expr, kept", [
    ("topk <= experts", 6),
    ("protocol = 'ubep' AND topk > 1", 2),
    ("sync IN ('sw', 'sp') OR NOT topk < 8", 6),
    ("experts % ranks = 0 AND 2 <= topk * 2 AND topk * 2 < 8", 4),
    ("-topk + 4 >= ranks // 2", 4),
    ("65536 * 65536 > 0", 6),                             # 64-bit, not wrapped around to 0
    ("POWER(topk, -1.0) = 0.5", 2),
    ("ranks * 1e19 > 9223372036854775807", 6),            # a float product past int64
    ("topk IN (1, 4.0, 2.5)", 4),
    ("topk NOT IN (2)", 4),
    ("zipf_s IN (1, 2)", 6),
    ("topk BETWEEN 2 AND 4 AND protocol <> 'bsp'", 2),
    ("protocol LIKE 'u%'", 3),                            # a pattern: no enum value itself
    ("topk > 1 AND 4 // (topk - 1) >= 2", 2),             # decided where it would divide by 0
    ("topk = 1 OR 4 % (topk - 1) = 0", 4),
    ("topk = 1 OR 4 / NULLIF(topk - 1, 0) >= 4", 4),      # a guarded division: null, decided
    ("topk > 1 AND batch / NULLIF(topk - 1, 0) > 4", 4),
])
def test_filters_drop_points(tmp_path, expr, kept):
    g = load_grid(grid_of(tmp_path, """
        [grid]
        ranks = [4]
        experts = [4]
        topk = [1, 2, 4]
        protocol = ["bsp", "ubep"]
        sync = "sw"
        """, f'name = "t"\nfilter = "{expr}"\n'))
    assert g.size == kept and g.product == 6


SIX = """
    [grid]
    ranks = [4]
    experts = [4]
    topk = [1, 2, 4]
    protocol = ["bsp", "ubep"]
    """


@pytest.mark.parametrize("expr, refused", [
    ("topk > 1 AND batch / (topk - 1) > 4", "is undefined at batch = 64, topk = 1: a term of it "
     "is no finite number there"),
    ("topk <> 1 OR 4 % (topk - 1) = 0", "is undefined at topk = 1: it is null there"),
    ("topk > 1 OR POWER(topk - 2, 0.5) > 0", "is undefined at topk = 1: a term of it is no"),
    ("topk >= AVG(topk)", "decides a point by other points"),
    ("COUNT(*) > 1", "decides a point by other points"),
    ("ROW_NUMBER() OVER () > 1", "decides a point by other points"),
    ("topk = MAX(topk) OVER (PARTITION BY protocol)", "decides a point by other points"),
])
def test_a_filter_refuses_a_point_it_does_not_decide_by_its_own_parameters(tmp_path, expr,
                                                                           refused):
    """Never silently kept or dropped: a point where the filter is null and the rest of it does
    not decide (an integer division or remainder by zero), where a term is no finite number (a
    float division by zero, a root of a number below zero: a NaN would pass as greater than
    every number), or a filter that looks at other points (an aggregate or a window would see
    the other points of a chunk of the grid, and decide by where the chunks are cut)."""
    with pytest.raises(InputError) as e:
        load_grid(grid_of(tmp_path, SIX, f'name = "t"\nfilter = "{expr}"\n'))
    assert e.value.key == "sweep.filter" and refused in str(e.value)


def test_a_bad_filter_is_one_message_and_exit_code_2_before_any_work(tmp_path):
    out = tmp_path / "results"
    for expr in ("topk <=", "topk <= k", "2 <= topk < 8"):
        path = grid_of(tmp_path, SIX, f'name = "t"\nfilter = "{expr}"\n')
        code, stdout, stderr = run_cli("sweep", path, "--out", out)
        assert code == 2 and stdout == "" and not out.exists(), stderr
        assert stderr.startswith(f"error: {path}: sweep.filter: '{expr}' ")
        assert stderr.count("\n") == 1


def test_every_filter_of_a_list_must_hold(tmp_path):
    sizes = [load_grid(grid_of(tmp_path, SIX, f'name = "t"\nfilter = {flt}\n')).size
             for flt in ('"topk > 1"', '"protocol = \'ubep\'"',
                         '["topk > 1", "protocol = \'ubep\'"]')]
    assert sizes == [4, 3, 2]


def test_integers_in_a_filter_compare_exactly(tmp_path):
    """An integer constant is 64-bit, so a seed just above 2^62 compares exactly with it (as
    floats, 2^62 + 1 equals 2^62); a constant past the floats' range is refused, not used."""
    body = "[grid]\nranks = 8\n"
    for flt, kept in ((f"seed > {2 ** 62}", [2 ** 62 + 1]), ("seed % 2 = 1", [2 ** 62 + 1]),
                      (f"seed < {2 ** 64}", [0, 2 ** 62 + 1])):
        path = grid_of(tmp_path, body, f'name = "t"\nseeds = [0, {2 ** 62 + 1}]\n'
                       f'filter = "{flt}"\n')
        assert load_grid(path).points["seed"].to_list() == kept, flt
    path = grid_of(tmp_path, body, 'name = "t"\nfilter = "ranks < 1e400"\n')
    with pytest.raises(InputError, match="inf is not a finite number"):
        load_grid(path)


def test_the_million_grid_covers_the_papers_ranges():
    g = load_grid(SWEEPS / "million.toml")
    assert g.size >= 1_000_000
    p = g.points
    assert (p["batch"].min(), p["batch"].max()) == (8, 128)
    assert (p["topk"].min(), p["topk"].max()) == (1, 8)
    assert (p["ranks"].min(), p["ranks"].max()) == (16, 256)
    assert sorted((p["experts"] // p["ranks"]).unique()) == [1, 2, 3, 4]
    assert (p["cumsum_cores"].min(), p["cumsum_cores"].max()) == (1, 16)
    for name, n in (("protocol", 2), ("sync", 4), ("schedule", 3)):
        assert p[name].n_unique() == n
    assert p["seed"].n_unique() > 1
    assert p.select(NAMES).is_duplicated().sum() == 0


@pytest.mark.parametrize("path", sorted(SWEEPS.glob("*.toml")), ids=lambda p: p.name)
def test_every_ready_grid_loads_with_the_size_the_docs_give(path):
    g = load_grid(path)
    assert g.size > 0 and g.out is not None
    doc = (SWEEPS.parent / "docs" / "sweeps.md").read_text()
    (row,) = [line for line in doc.splitlines() if line.startswith(f"| `sweeps/{path.name}` |")]
    assert row.rstrip(" |").rsplit("| ", 1)[1] == f"{g.size:,}"


def test_fingerprint_follows_the_points_not_the_text(tmp_path):
    a = load_grid(write_grid(tmp_path, TINY_GRID, "a.toml"))
    b = load_grid(write_grid(tmp_path, "# a comment\n" + TINY_GRID.replace(
        'out = "tiny-results"', 'out = "elsewhere"'), "b.toml"))
    c = load_grid(write_grid(tmp_path, TINY_GRID.replace("seeds = [0, 1]", "seeds = [0, 2]"),
                             "c.toml"))
    assert a.size == TINY_SIZE
    assert a.fingerprint == b.fingerprint != c.fingerprint


HUGE = "1" + "0" * 400   # a TOML integer past the floats' range
BAD = [
    # (grid body, key named in the error, a fragment of the message)
    ("[grid]\nbatch = [8]\n[extra]\n", "extra", "allowed: sweep, grid, zip, profile"),
    ("[grid]\nbatchsize = [8]\n", "grid.batchsize", "unknown parameter; allowed: ranks"),
    ("[grid]\nseeds = [1]\n", "grid.seeds", f"{NAMES[-1]} (the seeds are the [sweep] seeds axis)"),
    ("[grid]\nbatch = ['8']\n", "grid.batch", "expected an integer"),
    ("[grid]\nbatch = [true]\n", "grid.batch", "expected an integer, got true"),  # TOML's spelling
    ("[grid]\nranks = 16.0\n", "grid.ranks", "expected an integer, got 16.0: TOML writes "
     "integers without a point (16)"),
    ("[grid]\nzipf_s = false\n", "grid.zipf_s", "expected a finite number, got false"),
    ("[grid]\nbatch = []\n", "grid.batch", "empty axis"),
    ("[grid]\nbatch = { range = [16, 8] }\n", "grid.batch",
     "range [16, 8]: first is above last; a range counts up from first to last: write [8, 16]"),
    ("[grid]\nbatch = { range = [1, 10], step = 4 }\n", "grid.batch",
     "range [1, 10] with step 4 ends at 9, not 10: make last 9, or choose a step that reaches 10"),
    ("[grid]\nhidden = { range = [1000, 7168], factor = 2 }\n", "grid.hidden",
     "range [1000, 7168] with factor 2 ends at 4000, not 7168: make last 4000"),
    ("[grid]\nhot_share = { range = [0.1, 0.35], step = 0.1 }\n", "grid.hot_share",
     "range [0.1, 0.35] with step 0.1 ends at 0.3, not 0.35"),
    ("[grid]\nbatch = { range = [1, 2], factor = 1.4142135623730951 }\n", "grid.batch",
     "needs integer values; range [1, 2] with factor 1.41421356237 gives 1.41421356237"),
    ("[grid]\nbatch = { range = [8] }\n", "grid.batch", "range = [first, last]"),
    ("[grid]\nbatch = { range = [8, 16], stride = 2 }\n", "grid.batch", "unknown key stride"),
    ("[grid]\nbatch = { range = [8, 16], step = 0.5 }\n", "grid.batch", "integer range"),
    ("[grid]\nsync = { range = [1, 2] }\n", "grid.sync", "sw, tff, dc, sp"),
    ("[grid]\nsync = ['sw', 'xx']\n", "grid.sync", "choose one of sw, tff, dc, sp"),
    ("[grid]\nbatch = [8, 8]\n", "grid.batch", "appears twice"),
    ("[grid]\nbatch = [0]\n", "grid.batch", "below the minimum 1"),
    ("[grid]\nbatch = [[8]]\n", "grid.batch", "nested list"),
    ("[grid]\nranks = 4\ntopk = 2\nbatch_spread = 'list'\nbatches = [1, 2]\n", "batches",
     "2 entries; batch_spread = list takes one per rank (4)"),
    ("[grid]\nbatches = [[1, 'x']]\n", "grid.batches", "expected integers of at least 0"),
    ("[grid]\nbatches = { range = [1, 2] }\n", "grid.batches", "expected a list of integers"),
    ("[grid]\nbatch_cv = -1.0\n", "grid.batch_cv", "below the minimum 0"),
    ("[grid]\nseed = [1, 2]\n", "grid.seed", "[sweep] seeds"),
    ("[grid]\nranks = [4]\n[[zip]]\nranks = [8]\nexperts = [8]\n", "zip[0].ranks",
     "already an axis at grid.ranks"),
    ("[[zip]]\nranks = [4, 8]\nexperts = [8]\n", "zip[0]", "equal lengths"),
    ("[[zip]]\nranks = [4, 4]\nexperts = [8, 8]\n", "zip[0]", "appears twice"),
    ("[[zip]]\nranks = [4]\n", "zip[0]", "two or more"),
    ("[[zip]]\nranks = []\nexperts = []\n", "zip[0].ranks", "empty axis; expected a list"),
    ("[grid]\nranks = [4]\ntopk = [8]\n", "topk", "exceeds experts (4); a token's experts"),
    ("[grid]\ncores = 8\ncumsum_cores = [4, 8]\n", "cumsum_cores", "8 is not allowed with cores 8"),
    ("[profile]\nwarp_size = 32\n", "profile.warp_size", "unknown hardware key; allowed"),
    ("[profile]\ncores = 'many'\n", "profile.cores", "expected an integer"),
    ("[[zip]]\nranks = 4\nexperts = 8\n", "zip[0].ranks", "expected a list of values"),
    # integers past the floats' range (TOML's are unbounded in tomllib) are refused, not raised
    ("[grid]\nzipf_s = [HUGE]\n", "grid.zipf_s", "expected a finite number"),
    ("[grid]\nbatch = { range = [1, 8], step = HUGE }\n", "grid.batch", "step 1000"),
    ("[grid]\nhot_share = { range = [0.1, 0.5], step = HUGE }\n", "grid.hot_share",
     "is too large"),
    ("[profile]\negress_gbps = HUGE\n", "profile.egress_gbps", "is outside [0.001, 1e+06]"),
    ("[profile]\ntier_sizes = [16, HUGE]\n", "profile.tier_sizes", "integers in [1, 1048576]"),
]
BAD_SWEEP = [
    ('name = "t"\nseeds = []\n', "sweep.seeds", "empty axis"),
    ('name = "t"\nseeds = [1.5]\n', "sweep.seeds", "expected an integer"),
    ('name = "t"\nseeds = [[1]]\n', "sweep.seeds", "expected a value, a list"),
    ('name = "t"\nworkers = 3\n', "sweep.workers", "unknown key; allowed: name"),
    ('out = "x"\n', "sweep.name", "non-empty string"),
    ('name = "t"\nfilter = 3\n', "sweep.filter", "a string or a list of strings"),
    ('name = "t"\nprofile = "nowhere.toml"\n', "sweep.profile", "cannot read"),
    ('name = "t"\nprofile = "cm385"\n', "sweep.profile",
     "a built-in profile (cm384, cm384_pod, three_tier, cm384_oversubscribed, h800) or a TOML"),
    ('name = "t"\nprofile = 3\n', "sweep.profile", "expected a string"),
    ('name = "t"\nout = 3\n', "sweep.out", "expected a directory name"),
]
BAD = [(body.replace("HUGE", HUGE), key, fragment) for body, key, fragment in BAD]
BAD_SWEEP = [(body.replace("HUGE", HUGE), key, fragment) for body, key, fragment in BAD_SWEEP]
# (a filter, what its one message says), on a grid of one point: topk 8, batch 64
BAD_FILTERS = [
    ("topk <=", "'topk <=' does not parse"),
    ("topk <= k", "unknown name 'k' (parameters: ranks"),
    ("protocol = 'upep'", "'upep' is not a protocol; choose one of bsp, ubep"),
    ("sync IN ('sw', 'fast')", "'fast' is not a sync; choose one of sw, tff, dc, sp"),
    ("__import__('os').getpid() > 0", "does not parse"),
    ("topk + 1", "gives Int64 values, not true or false"),
    ("topk > 100", "keeps none of the 1 points"),
    ("ranks IN (16, 'a')", "cannot be evaluated"),
    ("4 < protocol", "cannot be evaluated"),
    ("sync + 1 > 0", "cannot be evaluated"),
    ("trace = 3", "cannot be evaluated"),
    ("2 <= topk < 9", "compares the truth of a comparison with a number: SQL does not chain"),
    ("ranks < 1e400", "inf is not a finite number"),
    (f"ranks < {HUGE}", "does not parse"),
    ("batch / (topk - 8) > 1", "is undefined at batch = 64, topk = 8: a term of it is no finite"),
    ("SQRT(topk - 9) > 0", "is undefined at topk = 8"),
    ("batch % (2 - 2) = 0", "is undefined at batch = 64: it is null there"),
    # 0.7.0's filters, in Python: what to write instead
    ("topk ** 2 > 1", "0.7.0's filters were Python: write POWER(a, b) for a ** b"),
    ("sync in ['sw']", "write (a, b) for a list [a, b], as in sync IN ('sw', 'sp')"),
    ('protocol == "ubep"', "unknown name 'ubep'"),
    ('protocol == "ubep"', "write 'ubep' for \"ubep\" (double quotes name a column)"),
]


@pytest.mark.parametrize("text, key, fragment", [
    ('grid = 3\n[sweep]\nname = "t"\n', "grid", "expected a table ([grid])"),
    ('zip = 3\n[sweep]\nname = "t"\n', "zip", "expected tables [[zip]]"),
    ('[sweep]\nname = "t"\n[zip]\nranks = [4, 8]\nexperts = [8, 16]\n', "zip",
     "expected tables [[zip]]"),
])
def test_a_table_of_the_wrong_kind_is_named(tmp_path, text, key, fragment):
    path = write_grid(tmp_path, text)
    with pytest.raises(InputError) as e:
        load_grid(path)
    assert e.value.key == key and fragment in str(e.value)


@pytest.mark.parametrize("body, key, fragment", BAD)
def test_grid_errors_name_the_file_and_key(tmp_path, body, key, fragment):
    path = grid_of(tmp_path, body)
    with pytest.raises(InputError) as e:
        load_grid(path)
    assert e.value.key == key
    assert str(e.value).startswith(f"{path}: {key}: ")
    assert fragment in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("sweep, key, fragment", BAD_SWEEP)
def test_sweep_table_errors_name_the_file_and_key(tmp_path, sweep, key, fragment):
    path = grid_of(tmp_path, "", sweep)
    with pytest.raises(InputError) as e:
        load_grid(path)
    assert e.value.key == key and str(path) in str(e.value)
    assert fragment in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("text, fragment", BAD_FILTERS)
def test_filter_errors_name_the_file_and_the_filter(tmp_path, text, fragment):
    path = grid_of(tmp_path, "", f"name = 't'\nfilter = '''{text}'''\n")
    with pytest.raises(InputError) as e:
        load_grid(path)
    assert e.value.key == "sweep.filter" and str(e.value).startswith(f"{path}: sweep.filter: ")
    assert fragment in str(e.value) and "\n" not in str(e.value)


def test_trace_files_are_relative_to_the_grid_file(tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    rows = [(r, t, k, (r + t + k) % 4) for r in range(4) for t in range(2) for k in range(2)]
    pl.DataFrame(rows, schema=["rank", "token", "k", "expert"], orient="row").write_parquet(
        tmp_path / "sub" / "t.parquet")
    body = "[grid]\nranks = 4\nbatch = 2\ntopk = 2\nrouting = 'trace'\ntrace = '{}'\n"
    path = write_grid(tmp_path / "sub", f'[sweep]\nname = "t"\n{body.format("t.parquet")}')
    monkeypatch.chdir(tmp_path)  # not the grid's directory
    assert load_grid(path).points["trace"].to_list() == [str(tmp_path / "sub" / "t.parquet")]
    path.write_text(path.read_text().replace("t.parquet", "absent.parquet"))
    with pytest.raises(InputError) as e:
        load_grid(path)
    assert e.value.key == "grid.trace" and f"no such file {tmp_path}/sub/absent" in str(e.value)


def write_trace(path, shift):
    """A trace of 4 ranks, batch 2, top-2 over 4 experts; `shift` moves every expert."""
    rows = [(r, t, k, (r + t + k + shift) % 4)
            for r in range(4) for t in range(2) for k in range(2)]
    pl.DataFrame(rows, schema=["rank", "token", "k", "expert"], orient="row").write_parquet(path)


@pytest.mark.parametrize("axes", [
    "trace = ['a.parquet', 'b.parquet']\n",
    "[[zip]]\ntrace = ['a.parquet', 'b.parquet']\nhidden = [128, 128]\n"])
def test_two_traces_with_the_same_routing_are_one_point_listed_twice(tmp_path, axes):
    """A trace counts by its content, as its config_id does: a copy of a trace beside it on an
    axis would be one configuration twice (two rows with one config_id)."""
    for name in ("a", "b", "c"):
        write_trace(tmp_path / f"{name}.parquet", 0 if name != "c" else 1)
    path = write_grid(tmp_path, f'[sweep]\nname = "t"\n[grid]\nranks = 4\nbatch = 2\n'
                                f'topk = 2\nrouting = "trace"\n{axes}')
    with pytest.raises(InputError) as e:
        load_grid(path)
    assert e.value.key in ("grid.trace", "zip[0]")
    assert "a.parquet" in str(e.value) and "b.parquet" in str(e.value)
    assert "one configuration" in str(e.value)
    path.write_text(path.read_text().replace("b.parquet", "c.parquet"))
    assert load_grid(path).size == 2


def test_a_filter_names_trace_files_as_the_grid_does(tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    for shift, name in enumerate("ab"):
        write_trace(tmp_path / "sub" / f"{name}.parquet", shift)
    monkeypatch.chdir(tmp_path)  # not the grid's directory
    body = ("[grid]\nranks = 4\nbatch = 2\ntopk = 2\nrouting = 'trace'\n"
            "trace = ['a.parquet', 'b.parquet']\n")
    for flt, kept in (("trace = 'a.parquet'", ["a"]), ("trace IN ('b.parquet')", ["b"]),
                      ("trace <> 'a.parquet'", ["b"])):
        path = write_grid(tmp_path / "sub", f'[sweep]\nname = "t"\nfilter = "{flt}"\n{body}')
        assert load_grid(path).points["trace"].to_list() == [
            str(tmp_path / "sub" / f"{n}.parquet") for n in kept]


def test_a_profile_files_error_names_that_file_and_its_hardware_key(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "hw.toml").write_text("takes = { cm384 = \"*\" }\n[hardware]\ncores = 'many'\n")
    path = grid_of(tmp_path, "[profile]\ninit_cycles = 200\n",
                   'name = "t"\nprofile = "sub/hw.toml"')
    with pytest.raises(InputError) as e:
        load_grid(path)
    assert e.value.key == "hardware.cores" and e.value.source == str(tmp_path / "sub" / "hw.toml")


def test_unreadable_or_invalid_toml(tmp_path):
    with pytest.raises(InputError, match="cannot read"):
        load_grid(tmp_path / "absent.toml")
    with pytest.raises(InputError, match="not valid TOML"):
        load_grid(write_grid(tmp_path, "[sweep\n"))


def test_filter_is_never_evaluated_as_python():
    for text in ("open('x')", "[x for x in ()]", "lambda: 1", "ranks if 1 else 2", "a.b",
                 "{1: 2}", "ranks[0]"):
        with pytest.raises(InputError):
            compile_filter(text)


def test_the_documented_example_is_complete_and_its_size_is_as_documented(tmp_path):
    doc = (SWEEPS.parent / "docs" / "sweeps.md").read_text()
    example = re.findall(r"```toml\n(\[sweep\].*?)```", doc, re.S)[0]
    code, stdout, stderr = run_cli("sweep", write_grid(tmp_path, example), "--dry-run")
    assert code == 0, stderr
    assert stdout.strip() in doc.splitlines()   # the whole line, not a prefix of it


def test_a_list_parameter_is_one_value_and_a_list_of_lists_an_axis(tmp_path):
    g = load_grid(grid_of(tmp_path, """
        [grid]
        ranks = 4
        topk = 2
        batch_spread = "list"
        batches = [[8, 0, 4, 4], "1,1,1,1"]
        """))
    assert g.points["batches"].to_list() == ["8,0,4,4", "1,1,1,1"]
    for d in ("one", "unread"):
        (tmp_path / d).mkdir()
    one = load_grid(grid_of(tmp_path / "one", """
        [grid]
        ranks = 4
        topk = 2
        batch_spread = "list"
        batches = [8, 0, 4, 4]
        """))
    assert one.points["batches"].to_list() == ["8,0,4,4"]
    # not read without batch_spread = list: recorded at its default, one configuration
    unread = load_grid(grid_of(tmp_path / "unread", """
        [grid]
        ranks = 4
        topk = 2
        batches = [[8, 0, 4, 4], [1, 1, 1, 1]]
        """))
    assert unread.size == 1 and unread.points["batches"].to_list() == [""]
