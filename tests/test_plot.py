"""`ubepsim plot`: every kind writes a non-empty PNG from the input it documents; bad input
exits 2 with one message and writes nothing."""

from __future__ import annotations

import shutil

import polars as pl
import pytest

from conftest import run_cli
from ubepsim.model.api import simulate_table
from ubepsim.model.params import make_config
from ubepsim.model.profile import load_profile

PNG = b"\x89PNG\r\n\x1a\n"


def sweep_rows(directory, name, points) -> str:
    """A small results dataset, as `ubepsim sweep` writes it (one row per configuration)."""
    frame = pl.DataFrame([make_config(p, 8).as_dict() for p in points])
    path = directory / name
    path.mkdir()
    simulate_table(frame, load_profile()).write_parquet(path / "part-0-1.parquet")
    return str(path)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("plots")
    base = {"topk": 2, "cores": 8}
    out = {
        "heatmap": sweep_rows(d, "groups", [
            {**base, "ranks": r, "batch": b, "cumsum_cores": c, "seed": s}
            for r in (4, 8) for b in (4, 16) for c in (1, 2, 3) for s in (0, 1)]),
        "breakdown": sweep_rows(d, "phases", [
            {**base, "ranks": 8, "batch": b, "protocol": p, "sync": y, "schedule": sc}
            for b in (4, 16) for p, y, sc in (("bsp", "sw", "expert_block"),
                                              ("ubep", "sp", "homogenized"))]),
        # every op under each protocol; the combines record dtype at its default (they do
        # not read it), the dispatches and layers are fp8
        "ops": sweep_rows(d, "ops", [
            {**base, "ranks": 8, "batch": 8, "op": op, "protocol": p, "sync": y,
             "schedule": sc, "dtype": "fp8", "expert_fixed_us": 3.0}
            for op in ("dispatch", "combine", "layer")
            for p, y, sc in (("bsp", "sw", "expert_block"), ("ubep", "sp", "homogenized"))]),
        "sync": sweep_rows(d, "payload", [
            {**base, "ranks": r, "hidden": h, "sync": y}
            for r in (4, 8) for h in (8, 64, 512) for y in ("sw", "tff", "dc", "sp")]),
        "skew": sweep_rows(d, "skew", [
            {**base, "ranks": r, "experts": 4 * r, "batch": 16, "op": op, "protocol": p,
             "routing": "lognormal", "lognormal_sigma": sigma, "seed": s}
            for r in (4, 8) for op in ("dispatch", "combine") for p in ("bsp", "ubep")
            for sigma in (0.0, 1.0, 2.0) for s in (0, 1)]),
    }
    timelines = []
    for schedule, protocol in (("expert_block", "bsp"), ("balanced", "ubep"),
                               ("homogenized", "ubep")):
        path = d / f"{schedule}.parquet"
        code, _, err = run_cli("run", "--ranks", 8, "--batch", 8, "--topk", 2, "--cores", 8,
                               "--schedule", schedule, "--protocol", protocol, "--timeline",
                               path)
        assert code == 0, err
        timelines.append(str(path))
    out["core"] = timelines
    out["timeline"] = timelines[2:]
    # Malformed timelines: each must be refused when read, naming the file.
    tl = pl.read_parquet(timelines[2])
    for name, frame in {
        "tl_empty": tl.head(0),
        "tl_die_str": tl.with_columns(pl.col("die").cast(pl.String)),
        "tl_start_str": tl.with_columns(pl.col("start_us").cast(pl.String)),
        "tl_end_null": tl.with_columns(end_us=pl.when(pl.col("core") == 1).then(None)
                                       .otherwise(pl.col("end_us"))),
        "tl_no_send": tl.filter(pl.col("phase") != "send"),
        "tl_backwards": tl.with_columns(end_us=pl.col("start_us") - 1),
    }.items():
        frame.write_parquet(d / f"{name}.parquet")
        out[name] = str(d / f"{name}.parquet")
    # Results beside another Parquet file: a timeline, or a CSV named .parquet.
    part = next((d / "groups").glob("*.parquet"))
    for name, write in (("with_timeline", lambda p: shutil.copy(timelines[0], p)),
                        ("with_csv", lambda p: p.write_text("a,b\n1,2\n"))):
        (d / name).mkdir()
        shutil.copy(part, d / name)
        write(d / name / "zz.parquet")
        out[name] = str(d / name)
    (d / "no_latency").mkdir()
    pl.read_parquet(part).with_columns(latency_us=pl.lit(None, pl.Float64)).write_parquet(
        d / "no_latency" / part.name)
    out["no_latency"] = str(d / "no_latency")
    return out


@pytest.mark.parametrize("kind", ["heatmap", "breakdown", "core", "sync", "skew", "timeline"])
def test_each_kind_writes_a_png(tmp_path, data, kind):
    inputs = data[kind] if isinstance(data[kind], list) else [data[kind]]
    target = tmp_path / f"{kind}.png"
    code, out, err = run_cli("plot", *inputs, "--kind", kind, "--out", target)
    assert code == 0, err
    assert f"wrote {target}" in out
    head = target.read_bytes()[:8]
    assert head == PNG and target.stat().st_size > 5000
    assert [p.name for p in tmp_path.iterdir()] == [target.name]   # no temporary file left


def test_options_of_each_input(tmp_path, data):
    code, _, err = run_cli("plot", data["breakdown"], "--kind", "breakdown", "--where",
                           "batch = 4", "--out", tmp_path / "b.png")
    assert code == 0, err
    code, _, err = run_cli("plot", *data["core"], "--kind", "core", "--label", "CANN EP",
                           "--label", "UBEP w/o mapping", "--label", "UBEP", "--die", 3,
                           "--out", tmp_path / "a.png")
    assert code == 0, err


def test_a_breakdown_stacks_each_ops_phases_to_its_latency(data):
    """Over every op: a combine's bars hold no CalCumSum or reordering, a layer's its experts'
    time, and every bar is as tall as its row's latency. What a row does not read (dtype in a
    combine, sync under a bsp combine) is no variant or group of its own."""
    from ubepsim.sweep.plot import breakdown, breakdown_parts, read_results

    frame = read_results([data["ops"]], "breakdown", None)
    bsp_combine = frame.filter((pl.col("op") == "combine") & (pl.col("protocol") == "bsp"))
    assert bsp_combine["sync"].to_list() == [None] and bsp_combine["dtype"].to_list() == [None]
    only = {op: [c for c, _, _ in breakdown_parts(frame.filter(pl.col("op") == op))]
            for op in ("dispatch", "combine", "layer")}
    assert only["combine"] == ["phase_init_us", "phase_send_us", "phase_sync_us",
                               "phase_reduce_us"]
    assert only["layer"] == [f"phase_{p}_us" for p in ("init", "send", "sync", "cumsum",
                                                         "reorder", "reduce")] + ["expert_us"]
    fig = breakdown(frame)
    tops: dict[float, float] = {}
    for bar in fig.axes[0].patches:
        tops[round(bar.get_x(), 6)] = tops.get(round(bar.get_x(), 6), 0.0) + bar.get_height()
    assert len(tops) == 6   # one bar per op and protocol: no group split by dtype
    assert sorted(tops.values()) == pytest.approx(sorted(frame["latency_us"]))
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert "combine\nbsp\n-\n-" in labels


@pytest.mark.filterwarnings("error::RuntimeWarning")   # pytest would swallow it otherwise
def test_heatmap_of_a_sparse_grid_warns_nothing(tmp_path, data):
    # ranks 8 lacks batch 16: its panel has a blank row, which is no reason for a warning
    code, _, err = run_cli("plot", data["heatmap"], "--kind", "heatmap", "--where",
                           "NOT (ranks = 8 AND batch = 16)", "--out", tmp_path / "h.png")
    assert code == 0 and not err, err


def test_default_output_name(tmp_path, monkeypatch, data):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli("plot", data["sync"], "--kind", "sync")
    assert code == 0, err
    assert (tmp_path / "sync.png").stat().st_size > 0


@pytest.mark.parametrize("make_args, words", [
    (lambda d: (d["heatmap"], "--kind", "bars"), ["--kind"]),
    (lambda d: ("nowhere", "--kind", "heatmap"), ["nowhere"]),
    (lambda d: (d["core"][0], "--kind", "heatmap"), ["DATASET"]),
    (lambda d: (d["heatmap"], "--kind", "timeline"), ["DATASET", "timeline"]),
    (lambda d: (d["sync"], "--kind", "heatmap"),
     ["DATASET", "hidden", "--where \"hidden = 8\""]),
    (lambda d: (d["sync"], "--kind", "breakdown"), ["hidden", "--where"]),
    (lambda d: (d["heatmap"], "--kind", "heatmap", "--out", "x.jpg"), ["--out", ".png"]),
    (lambda d: (d["heatmap"], "--kind", "heatmap", "--where", "warp = 1"), ["--where"]),
    (lambda d: (d["heatmap"], "--kind", "heatmap", "--where", "ranks = 99"), ["no rows"]),
    (lambda d: (d["heatmap"], "--kind", "heatmap", "--die", "1"), ["--die"]),
    (lambda d: (*d["core"], "--kind", "timeline"), ["timeline", "one"]),
    (lambda d: (*d["core"], "--kind", "core", "--label", "x"), ["--label"]),
    (lambda d: (d["timeline"][0], "--kind", "timeline", "--die", 99), ["--die", "99"]),
    (lambda d: (d["timeline"][0], "--kind", "core", "--where", "die = 1"), ["--where"]),
    (lambda d: (d["tl_empty"], "--kind", "timeline"), ["tl_empty", "no rows"]),
    (lambda d: (d["tl_empty"], "--kind", "core"), ["tl_empty", "no rows"]),
    (lambda d: (d["tl_die_str"], "--kind", "timeline"), ["tl_die_str", "die", "integer"]),
    (lambda d: (d["tl_start_str"], "--kind", "timeline"), ["tl_start_str", "start_us"]),
    (lambda d: (d["tl_end_null"], "--kind", "timeline"), ["tl_end_null", "end_us", "null"]),
    (lambda d: (d["tl_end_null"], "--kind", "core", "--die", 0), ["tl_end_null", "end_us"]),
    (lambda d: (d["tl_no_send"], "--kind", "core"), ["tl_no_send", "send"]),
    (lambda d: (d["tl_backwards"], "--kind", "core"), ["tl_backwards", "before start_us"]),
    (lambda d: (d["heatmap"], d["core"][0], "--kind", "heatmap", "--where", "ranks = 8"),
     ["DATASET", "expert_block.parquet", "not sweep results"]),
    (lambda d: (d["no_latency"], "--kind", "heatmap"), ["DATASET", "latency_us", "null"]),
    (lambda d: (d["sync"], "--kind", "sync", "--where", "hidden = 64"),
     ["DATASET", "several hidden"]),
    (lambda d: (d["skew"], "--kind", "skew", "--where", "lognormal_sigma = 0"),
     ["DATASET", "several skews"]),
    (lambda d: (d["heatmap"], "--kind", "heatmap", "--where", ""), ["--where", "empty"]),
    (lambda d: (d["heatmap"], "--kind", "heatmap", "--where", " "), ["--where", "empty"]),
])
def test_bad_input_exits_2_with_one_message(tmp_path, monkeypatch, data, make_args, words):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("plot", *make_args(data))
    assert code == 2
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    for w in words:
        assert w in err
    # plot has no parameter flags: a message must not send the user to one (--sync, ...).
    assert "(--" not in err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("name", ["with_timeline", "with_csv"])
def test_a_sweeps_directory_is_drawn_from_its_parts_with_a_warning_for_the_rest(
        tmp_path, data, name):
    code, out, err = run_cli("plot", data[name], "--kind", "heatmap", "--out", tmp_path / "h.png")
    assert code == 0 and (tmp_path / "h.png").is_file()
    assert err.splitlines() == [f"warning: {data[name]}: ignored 1 Parquet file(s) that are not "
                                "sweep parts (zz.parquet); give a file's own path to read it"]


def test_empty_dataset_is_not_the_current_directory(tmp_path, monkeypatch, data):
    monkeypatch.chdir(data["heatmap"])   # Path("") is "." : it would read these results
    code, _, err = run_cli("plot", "", "--kind", "heatmap", "--out", tmp_path / "h.png")
    assert code == 2 and err.startswith("error: DATASET:"), err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("kind", ["core", "timeline"])
def test_label_titles_timeline_figures(tmp_path, monkeypatch, data, kind):
    import ubepsim.sweep.plot

    titles = []
    monkeypatch.setattr(ubepsim.sweep.plot, "save",
                        lambda fig, path: titles.extend(ax.get_title() for ax in fig.axes))
    code, _, err = run_cli("plot", data["timeline"][0], "--kind", kind, "--label", "Foo",
                           "--out", tmp_path / "t.png")
    assert code == 0, err
    assert any(t.startswith("Foo") for t in titles), titles


def test_skew_draws_each_ops_latency_against_its_busiest_port(data):
    """A line per op and protocol, its points the busiest die's load in the op's direction
    (dispatch: taken in; combine: sent) and the latency, averaged over seeds, in load order."""
    from ubepsim.sweep import plot as figures
    frame = figures.read_results([data["skew"]], "skew", None)
    fig = figures.skew(frame)
    ax = fig.axes[0]                                  # 4 ranks
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert set(lines) == {f"{op}, {p}" for op in ("dispatch", "combine")
                          for p in ("bsp", "ubep")}
    rows = frame.filter((pl.col("ranks") == 4) & (pl.col("op") == "combine")
                        & (pl.col("protocol") == "bsp"))
    want = rows.group_by("lognormal_sigma").agg(pl.col("send_max_mean").mean(),
                                                pl.col("latency_us").mean()).sort("send_max_mean")
    x, y = lines["combine, bsp"].get_data()
    assert list(x) == pytest.approx(want["send_max_mean"].to_list())
    assert list(y) == pytest.approx(want["latency_us"].to_list())
    assert list(x) == sorted(x) and x[-1] > x[0]


def test_every_phase_has_its_own_colour():
    """The Gantt chart colours the timeline phases the model writes, and the breakdown the
    result phases, each its own colour (a phase added or renamed would otherwise be drawn
    black, or take another's)."""
    from ubepsim.kernels.layout import COMBINE_TIMELINE, DISPATCH_TIMELINE, LAYER_GAP, PHASES
    from ubepsim.sweep.plot import PHASE_COLOURS

    written = {p for table in (DISPATCH_TIMELINE, COMBINE_TIMELINE) for phases in table.values()
               for p in phases} | {LAYER_GAP}
    assert set(PHASE_COLOURS) == written | {p.name for p in PHASES}
    assert len(set(PHASE_COLOURS.values())) == len(PHASE_COLOURS)


def test_core_figure_says_which_send_time_it_draws(tmp_path, monkeypatch, data):
    """The bars are the timeline's send phase (to the last store's issue), which is not the
    result send_max_core_us (to the last copy's completion); the figure says so."""
    import ubepsim.sweep.plot

    figs = []
    monkeypatch.setattr(ubepsim.sweep.plot, "save", lambda fig, path: figs.append(fig))
    code, _, err = run_cli("plot", *data["core"], "--kind", "core", "--out", tmp_path / "a.png")
    assert code == 0, err
    axes = figs[0].axes
    tl = pl.read_parquet(data["core"][0])
    die = ubepsim.sweep.plot.critical_die(tl)
    slowest = tl.filter((pl.col("die") == die) & (pl.col("phase") == "send")).select(
        (pl.col("end_us") - pl.col("start_us")).max()).item()
    assert f"slowest core's send phase {slowest:.1f} us (to its last store's issue)" \
        in axes[0].get_title()
    assert all(ax.get_ylabel() == "send phase (us)" for ax in axes)
    assert "send_max_core_us" in axes[-1].get_xlabel() and "completed" in axes[-1].get_xlabel()


def test_core_figure_draws_only_the_cores_that_send():
    """bsp with fewer copies per die than AIVs: the idle AIVs' send phases are empty, and the
    figure's bars and mean cover the others only (as send_mean_core_us does)."""
    from ubepsim.model.api import simulate
    from ubepsim.sweep.plot import core_sends

    tl = simulate(make_config({"ranks": 8, "batch": 2, "topk": 2, "cores": 8, "protocol": "bsp"},
                              8), load_profile(), timeline=True)["timeline"]
    die0 = tl.filter(pl.col("die") == 0)
    sends = core_sends(die0, 0, "t")
    empty = die0.filter((pl.col("phase") == "send") & (pl.col("end_us") == pl.col("start_us")))
    assert empty.height > 0 and sends.height == 8 - empty.height
    assert (sends["send_us"] > 0).all()


@pytest.fixture(scope="module")
def spread_sweep(tmp_path_factory):
    """A sweep over the batches' spreads, as `ubepsim sweep` writes it (its profile
    recorded)."""
    d = tmp_path_factory.mktemp("dies")
    grid = d / "grid.toml"
    grid.write_text('[sweep]\nname = "dies"\nseeds = [0, 1]\n[grid]\nranks = 8\nbatch = 8\n'
                    'topk = 2\ncores = 8\nop = ["dispatch", "combine"]\n'
                    'batch_spread = ["equal", "cv", "zero"]\n')
    code, _, err = run_cli("sweep", grid, "--out", d / "out")
    assert code == 0, err
    return str(d / "out")


def test_dies_draws_each_rows_dies_as_the_model_gives_them(tmp_path, spread_sweep):
    from ubepsim.sweep import plot as figures
    from ubepsim.model.api import die_frame
    target = tmp_path / "dies.png"
    where = "op = 'combine' AND seed = 1"
    code, out, err = run_cli("plot", spread_sweep, "--kind", "dies", "--where", where,
                             "--out", target)
    assert code == 0, err
    assert target.read_bytes()[:8] == PNG and target.stat().st_size > 5000
    frame = figures.read_results([spread_sweep], "dies", where)
    series = figures.die_series(spread_sweep, where)
    # a line per row, labelled by what differs, each die's finish and load the model's
    assert [label for label, _ in series] == [
        "batch_spread equal", "batch_spread cv, batch_cv 0.5",
        "batch_spread zero, zero_token_share 0.25"]
    assert frame["batch_spread"].to_list() == ["equal", "cv", "zero"]
    for (label, dies), row in zip(series, frame.iter_rows(named=True)):
        config = {n: v for n, v in row.items() if n in ("ranks", "batch", "topk", "cores", "op",
                                                       "batch_spread", "seed")}
        assert dies.equals(die_frame(config, load_profile()))
        assert dies["finish_us"].max() == pytest.approx(row["latency_us"])
    fig = figures.dies(series)
    assert len(fig.axes[0].get_lines()) == 2 * frame.height   # a line and its slowest die each


def test_dies_refuses_too_many_rows_and_results_without_a_profile(tmp_path, data, spread_sweep):
    code, _, err = run_cli("plot", spread_sweep, "--kind", "dies", "--out", tmp_path / "d.png")
    assert code == 2 and "at most 6 rows; 12 match" in err
    code, _, err = run_cli("plot", spread_sweep, "--kind", "dies", "--where", "op = 'dispatch'",
                           spread_sweep, "--out", tmp_path / "d.png")
    assert code == 2 and "one sweep" in err
    # sweep_rows writes rows without the provenance `ubepsim sweep` records
    code, _, err = run_cli("plot", data["breakdown"], "--kind", "dies", "--where", "batch = 4",
                           "--out", tmp_path / "d.png")
    assert code == 2 and "records no hardware profile" in err
    code, _, err = run_cli("plot", data["timeline"][0], "--kind", "dies", "--where", "batch = 4",
                           "--out", tmp_path / "d.png")
    assert code == 2 and "is a timeline of one configuration" in err
    assert not list(tmp_path.iterdir())


def test_dies_of_a_timeline_are_its_configurations(tmp_path, data):
    """A timeline (`ubepsim run --timeline`) records its configuration and profile: --kind dies
    draws that configuration, its finishes those of the timeline's dies."""
    from ubepsim.sweep import plot as figures
    path = data["timeline"][0]
    ((label, dies),) = figures.die_series(path, None)
    tl = pl.read_parquet(path)
    ends = tl.group_by("die").agg(pl.col("end_us").max()).sort("die")["end_us"]
    assert dies["finish_us"].to_list() == pytest.approx(ends.to_list())
    assert label.startswith("config_id ")
    target = tmp_path / "d.png"
    code, _, err = run_cli("plot", path, "--kind", "dies", "--out", target)
    assert code == 0, err
    assert target.read_bytes()[:8] == PNG
