"""Figures of results, headless (matplotlib's Agg backend), in the shapes of the paper's.

Two inputs:
- sweep results (`ubepsim sweep`: one row per configuration) for `heatmap` (Figure 14),
  `breakdown` (Figures 3(a), 8), `sync` (Figure 10) and `skew` (latency against the busiest
  die's load); seeds are averaged, and every other
  parameter must either be an axis of the figure or hold one value (filter with a SQL WHERE);
- timelines (`ubepsim run --timeline`: one row per die, core and phase) for `core` (Figure 9)
  and `timeline` (a Gantt chart of one die's cores).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import polars as pl

from ..errors import InputError
from ..kernels.layout import LAYER_GAP, TIMELINE_PHASES
from ..files import replacing
from ..model.params import ENUMS, GATED, NAMES, TUNED, TUNED_COLUMN, Op, Sync, columns
from ..model.result_fields import EXPERT_COLUMN, PHASES, phase_column, phase_title

KINDS = ("heatmap", "breakdown", "core", "sync", "skew", "dies", "timeline")
TIMELINE_KINDS = ("core", "timeline")
# A timeline's columns and the type each holds, as `ubepsim run --timeline` writes them.
TIMELINE_COLUMNS = {"die": "integer", "core": "integer", "role": "string", "phase": "string",
                    "start_us": "number", "end_us": "number"}
TYPES = {"integer": lambda t: t.is_integer(), "string": lambda t: t == pl.String,
         "number": lambda t: t.is_numeric()}
TIMELINE_HINT = "not a timeline as `ubepsim run --timeline FILE.parquet` writes one"
# One colour per phase name, in every figure: the timeline's phases in the order
# kernels/layout.py declares them, then the result phases that are not timeline phases (sync,
# in a light shade of syncall's red).
PALETTE = ("#9e9e9e", "#1f77b4", "#d62728", "#ff7f0e", "#e377c2", "#2ca02c", "#8c564b",
           "#bcbd22", "#9467bd", "#17becf", "#7b4173", "#ffbb78", "#ff9896", "#393b79",
           "#637939", "#843c39")
PHASE_COLOURS = dict(zip((*TIMELINE_PHASES, *(p.name for p in PHASES
                                             if p.name not in TIMELINE_PHASES)), PALETTE))
# The columns that make a Parquet file sweep results: `ubepsim sweep` writes every parameter,
# config_id and the results; a timeline, a routing trace or a measurement file lacks some.
RESULTS_COLUMNS = (*NAMES, "config_id", "latency_us")
NEEDS = {
    "heatmap": ("ranks", "batch", "cumsum_cores", "latency_us"),
    "breakdown": ("protocol", *(phase_column(p.name) for p in PHASES), EXPERT_COLUMN),
    "sync": ("ranks", "sync", "batch", "topk", "bytes_per_rank", "latency_us"),
    "skew": ("ranks", "protocol", "op", "recv_max_mean", "send_max_mean", "latency_us"),
    "dies": ("latency_us",),
}
# dies: configurations re-simulated die by die, a line each (rows of one sweep, or a timeline's)
MAX_DIE_ROWS = 6
# skew: each op's load on its busiest die, the ports that carry it (dispatch: a receiver's
# ingress; combine: a returner's egress; a layer: the same die's, taken in by its dispatch)
SKEW_LOAD = {"dispatch": "recv_max_mean", "combine": "send_max_mean", "layer": "recv_max_mean"}
# ... and the parameters that make the skew, free to vary along a line
SKEW_KNOBS = ("routing", "zipf_s", "hot_experts", "hot_share", "hot_placement",
              "lognormal_sigma", "zero_experts", "zero_ranks", "trace")


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


# --- inputs ------------------------------------------------------------------------------------

def read_results(datasets: Sequence[str], kind: str, where: str | None) -> pl.DataFrame:
    """Sweep rows for `kind`, filtered; InputError if a needed column is missing."""
    if where is not None and not where.strip():   # not "no filter": the user meant one
        raise InputError("--where", "is empty; give a SQL condition, e.g. \"topk = 8\", or "
                         "leave --where out")
    frame = pl.concat([scan_results(d, kind) for d in datasets], how="diagonal_relaxed")
    if where:
        try:
            frame = pl.SQLContext(results=frame).execute(f"SELECT * FROM results WHERE {where}")
            frame = frame.collect()
        except pl.exceptions.PolarsError as e:
            raise InputError("--where", str(e).splitlines()[0]) from None
    else:
        frame = frame.collect()
    if frame.height == 0:
        raise InputError("DATASET", "no rows" + (" match --where" if where else ""))
    check_values(frame, NEEDS[kind], ", ".join(datasets), f"--kind {kind} needs a value in "
                 f"every row (leave such rows out with --where)")
    frame = frame.with_columns(pl.col(c).cast(pl.String) for c in ENUMS if c in frame.columns)
    frame = unread_as_null(frame)
    # a heat map places each row at the group size it ran; elsewhere "tuned" is one variant
    return frame if kind == "heatmap" else tuned_as_given(frame)


def tuned_as_given(frame: pl.DataFrame) -> pl.DataFrame:
    """cumsum_cores as a configuration gives it, as text: "tuned" where the row's size was
    tuned (that size follows the row's workload, and is no variant of its own), else the size
    (null where not read). Unchanged where no row says whether it was tuned (TUNED_COLUMN)."""
    if TUNED_COLUMN not in frame.columns or "cumsum_cores" not in frame.columns:
        return frame
    return frame.with_columns(pl.when(pl.col(TUNED_COLUMN)).then(pl.lit(TUNED))
                              .otherwise(pl.col("cumsum_cores").cast(pl.String))
                              .alias("cumsum_cores"))


def unread_as_null(frame: pl.DataFrame) -> pl.DataFrame:
    """Each parameter a row does not read (params.GATED: cumsum_cores under bsp, sync under a
    bsp combine, ...) as null, not at the default it is recorded at: a figure's variants and
    groups then follow what the rows simulate."""
    gates = tuple({g for gate in GATED.values() for g in gate.gates})
    cols = columns(_with_defaults(frame, gates), gates)
    return frame.with_columns(
        pl.when(pl.Series(gate.reads(cols))).then(pl.col(name)).otherwise(None).alias(name)
        for name, gate in GATED.items() if name in frame.columns)


def scan_results(dataset: str, kind: str) -> pl.LazyFrame:
    """One DATASET, each of its files checked to be sweep results with the columns `kind`
    needs (a timeline or a stray table beside the parts failed later, or was blamed on
    --where)."""
    from .engine import scan

    frame = scan(dataset, RESULTS_COLUMNS, f": not sweep results; --kind {kind} reads what "
                 f"`ubepsim sweep` writes")
    missing = [c for c in NEEDS[kind] if c not in frame.collect_schema().names()]
    if missing:
        raise InputError("DATASET", f"{dataset} has no column {missing[0]}; --kind {kind} "
                         f"needs sweep results with {', '.join(NEEDS[kind])}")
    return frame


def read_timeline(path: str) -> pl.DataFrame:
    p = Path(path)
    if not p.is_file():
        state = "is not a file" if p.exists() else "does not exist"
        raise InputError("DATASET", f"{path} {state}; --kind core and timeline read a "
                         f"timeline from `ubepsim run --timeline FILE.parquet`")
    try:
        frame = pl.read_parquet(p)
    except (OSError, pl.exceptions.PolarsError) as e:
        raise InputError("DATASET", f"cannot read {path}: {str(e).splitlines()[0]}") from None
    # Checked here, once, so that the figures may take every row as drawable.
    for column, kind in TIMELINE_COLUMNS.items():
        if column not in frame.columns:
            raise InputError("DATASET", f"{path} has no column {column}: {TIMELINE_HINT}")
        if not TYPES[kind](frame.schema[column]):
            raise InputError("DATASET", f"{path}: column {column} holds {frame.schema[column]}, "
                             f"not {kind}s: {TIMELINE_HINT}")
    if frame.height == 0:
        raise InputError("DATASET", f"{path} has no rows: {TIMELINE_HINT}")
    check_values(frame, TIMELINE_COLUMNS, path, TIMELINE_HINT)
    backwards = frame.filter(pl.col("end_us") < pl.col("start_us")).height
    if backwards:
        raise InputError("DATASET", f"{path}: end_us is before start_us in {backwards:,} rows: "
                         f"{TIMELINE_HINT}")
    return frame


def check_values(frame: pl.DataFrame, columns, what: str, hint: str) -> None:
    """Every value of `columns` is present and finite: a null or NaN would crash a figure or
    leave it blank."""
    for c in columns:
        col = frame[c]
        bad = col.null_count() + (int((~col.is_finite()).sum()) if col.dtype.is_float() else 0)
        if bad:
            raise InputError("DATASET", f"{what}: {c} is null or not finite in {bad:,} of "
                             f"{frame.height:,} rows; {hint}")


def single_valued(frame: pl.DataFrame, axes: Sequence[str], kind: str) -> None:
    """Each point of the figure's axes stands for one configuration (seeds apart): every other
    parameter holds one value there (experts may follow ranks, say)."""
    others = [n for n in NAMES if n in frame.columns and n not in axes and n != "seed"]
    if not others:
        return
    counts = frame.group_by([a for a in axes if a in frame.columns]).agg(
        pl.col(n).drop_nulls().n_unique() for n in others)   # (null: a row does not read it)
    for name in others:
        if counts[name].max() > 1:
            values = frame[name].drop_nulls().unique().sort().head(4).to_list()
            if name == "cumsum_cores":   # an integer column, and cumsum_tuned (tuned_as_given)
                example = TUNED_COLUMN if values[0] == TUNED else f"{name} = {values[0]}"
            else:
                example = f"{name} = " + (f"'{values[0]}'" if isinstance(values[0], str)
                                          else str(values[0]))
            # Keyed DATASET, not the parameter: plot has no flag per parameter (--sync, ...).
            raise InputError("DATASET", f"{name} takes several values "
                             f"({', '.join(map(str, values))}) at the same point of --kind "
                             f"{kind} ({', '.join(axes)}); pick one with --where, e.g. "
                             f"--where \"{example}\"")


def _with_defaults(frame: pl.DataFrame, names) -> pl.DataFrame:
    """The frame with each parameter of `names` it lacks at its default (a dataset written
    before the parameter was added)."""
    from ..model.params import PARAM_BY_NAME

    return frame.with_columns(pl.lit(PARAM_BY_NAME[n].default).alias(n) for n in names
                              if n not in frame.columns)


def critical_die(frame: pl.DataFrame) -> int:
    """The die that finishes last (the first of them on a tie)."""
    ends = frame.group_by("die").agg(pl.col("end_us").max()).sort(["end_us", "die"],
                                                                   descending=[True, False])
    return int(ends["die"][0])


def pick_die(frame: pl.DataFrame, die: int | None, path: str) -> tuple[int, pl.DataFrame]:
    if die is None:
        die = critical_die(frame)
    elif die not in set(frame["die"].to_list()):
        raise InputError("--die", f"{path} has dies 0-{frame['die'].max()}, not {die}")
    return die, frame.filter(pl.col("die") == die)


# --- figures -----------------------------------------------------------------------------------

def heatmap(frame: pl.DataFrame):
    """Extra latency over the row's best CalCumSum group size: batch by group size, one panel
    per rank count (Figure 14)."""
    gate = GATED["cumsum_cores"]
    frame = frame.filter(gate.reads(columns(_with_defaults(frame, gate.gates), gate.gates)))
    if frame.height == 0:
        raise InputError("DATASET", f"no rows that read cumsum_cores ({gate.says()}): the heat "
                         f"map sizes UBEP's CalCumSum group")
    single_valued(frame, ("ranks", "batch", "cumsum_cores", "protocol"), "heatmap")
    mean = frame.group_by("ranks", "batch", "cumsum_cores").agg(pl.col("latency_us").mean())
    ranks = sorted(mean["ranks"].unique())
    batches = sorted(mean["batch"].unique())
    sizes = sorted(mean["cumsum_cores"].unique())
    grids = []
    for r in ranks:
        g = np.full((len(batches), len(sizes)), np.nan)
        for b, c, v in mean.filter(pl.col("ranks") == r).select("batch", "cumsum_cores",
                                                                 "latency_us").rows():
            g[batches.index(b), sizes.index(c)] = v
        # fmin skips NaN without nanmin's warning on a batch this rank count lacks (a blank row)
        grids.append(g - np.fmin.reduce(g, axis=1, keepdims=True))
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(ranks), figsize=(4.6 * len(ranks) + 1, 0.5 * len(batches)
                                                      + 2.0), squeeze=False, sharey=True,
                             layout="constrained")
    top = max(float(np.nanmax(g)) for g in grids) or 1.0
    for ax, r, g in zip(axes[0], ranks, grids):
        im = ax.imshow(g, cmap="Reds", vmin=0.0, vmax=top, aspect="auto", origin="lower")
        ax.set_title(f"{r} ranks")
        ax.set_xticks(range(len(sizes)), [str(s) for s in sizes], fontsize=7)
        ax.set_yticks(range(len(batches)), [str(b) for b in batches])
        ax.set_xlabel("CalCumSum group size (cores)")
        for i in range(len(batches)):
            for j in range(len(sizes)):
                if np.isfinite(g[i, j]):
                    ax.text(j, i, "best" if g[i, j] == 0 else f"{g[i, j]:.1f}", ha="center",
                            va="center", fontsize=5.5,
                            color="white" if g[i, j] > 0.6 * top else "black")
    axes[0][0].set_ylabel("batch (tokens per rank)")
    fig.colorbar(im, ax=list(axes[0]), label="extra latency over the row's best (us)",
                 shrink=0.9)
    return fig


def breakdown(frame: pl.DataFrame):
    """Stacked critical-path phase times per variant (op, protocol, sync, schedule: Figures
    3(a) and 8), grouped by the one other parameter that varies, if any."""
    variant = [c for c in ("op", "protocol", "sync", "schedule") if c in frame.columns
               and frame[c].n_unique() > 1] or ["protocol"]
    others = [n for n in NAMES if n in frame.columns and n not in variant + ["seed"]
              and frame[n].drop_nulls().n_unique() > 1]
    group = others[:1]
    single_valued(frame, variant + group, "breakdown")
    keys = group + variant
    parts = breakdown_parts(frame)
    mean = frame.group_by(keys).agg(pl.col(c).mean() for c, _, _ in parts).sort(keys)
    # (a variant a row does not read, as sync under a bsp combine: "-")
    labels = [" / ".join("-" if v is None else str(v) for v in row)
              for row in mean.select(variant).rows()]
    names = sorted(set(labels), key=labels.index)
    xs = [mean[group[0]][i] if group else "" for i in range(mean.height)]
    groups = sorted(set(xs), key=xs.index)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(5.0, 1.2 * len(labels) + 2), 4.5),
                           layout="constrained")
    width = 0.8 / len(names)
    positions = [groups.index(x) + (names.index(lab) - (len(names) - 1) / 2) * width
                 for x, lab in zip(xs, labels)]
    bottom = np.zeros(mean.height)
    for col, name, colour in parts:
        v = mean[col].to_numpy()
        ax.bar(positions, v, width * 0.92, bottom=bottom, label=name, color=colour)
        bottom += v
    # A tick per bar names its variant; the groups' values go under them.
    ax.set_xticks(positions, [lab.replace(" / ", "\n") for lab in labels], fontsize=7)
    if group:
        for i, g in enumerate(groups):
            ax.annotate(f"{group[0]} = {g}", (i, 0), xytext=(0, -44),
                        textcoords="offset points", xycoords=("data", "axes fraction"),
                        ha="center", va="top", fontsize=9)
    ax.set_ylabel("latency (us), critical path")
    fig.legend(fontsize=8, loc="outside right upper")
    return fig


def breakdown_parts(frame: pl.DataFrame) -> list[tuple[str, str, str]]:
    """A breakdown's stacked parts, (column, label, colour): the phases on the critical path
    of the rows' ops, then a layer's experts' time if there is a layer; for each row they sum
    to its latency."""
    ops = {Op[o] for o in frame["op"].unique()} if "op" in frame.columns else {Op.dispatch}
    parts = [(phase_column(p.name), phase_title(p.name), PHASE_COLOURS[p.name]) for p in PHASES
             if ops & set(p.ops)]
    if Op.layer in ops:
        parts.append((EXPERT_COLUMN, "Experts", PHASE_COLOURS[LAYER_GAP]))
    return parts


def rank_panels(frame: pl.DataFrame, width: float):
    """A figure with a panel per rank count, side by side: (figure, [(axes, ranks, the frame's
    rows at those ranks)])."""
    ranks = sorted(frame["ranks"].unique())
    fig, axes = _pyplot().subplots(1, len(ranks), figsize=(width * len(ranks), 3.8),
                                   squeeze=False, layout="constrained")
    return fig, [(ax, r, frame.filter(pl.col("ranks") == r)) for ax, r in zip(axes[0], ranks)]


def sync(frame: pl.DataFrame):
    """Latency against payload per token, one line per Data-as-Flag variant, one panel per
    rank count (Figure 10)."""
    frame = frame.with_columns(payload=pl.col("bytes_per_rank") / (pl.col("batch")
                                                                   * pl.col("topk")))
    if frame["payload"].n_unique() < 2:   # a line per variant needs two points at least
        raise InputError("DATASET", f"--kind sync draws latency against payload per token, "
                         f"but every row has {frame['payload'][0]:g} bytes (hidden = "
                         f"{frame['hidden'][0]}); give sweep results with several hidden "
                         f"values")
    if frame["sync"].null_count():
        raise InputError("DATASET", f"--kind sync draws the Data-as-Flag variants, and "
                         f"{frame['sync'].null_count():,} rows read no sync (only where "
                         f"{GATED['sync'].says()}); leave them out with --where")
    single_valued(frame, ("ranks", "sync", "hidden", "dtype"), "sync")
    mean = frame.group_by("ranks", "sync", "payload").agg(pl.col("latency_us").mean()) \
        .sort("ranks", "sync", "payload")
    fig, panels = rank_panels(mean, 4.2)
    for ax, r, sub in panels:
        present = set(sub["sync"].unique())
        for s in [v.name for v in Sync if v.name in present]:   # the paper's order
            line = sub.filter(pl.col("sync") == s)
            ax.plot(line["payload"], line["latency_us"], marker="o", label=s)
        ax.set_xscale("log")
        ax.set_title(f"{r} ranks")
        ax.set_xlabel("payload per token (bytes)")
        ax.grid(alpha=0.3)
    op = frame["op"][0] if "op" in frame.columns else Op.dispatch.name   # single-valued
    panels[0][0].set_ylabel(f"{op} latency (us)")
    panels[-1][0].legend(title="sync")
    return fig


def skew(frame: pl.DataFrame):
    """Latency against the busiest die's load over the mean, one line per protocol and op, one
    panel per rank count: how an op's latency follows its hottest port (docs/model.md,
    "Workload")."""
    frame = frame.with_columns(load=pl.when(pl.col("op") == "combine")
                               .then(pl.col(SKEW_LOAD["combine"]))
                               .otherwise(pl.col(SKEW_LOAD["dispatch"])))
    axes = ("ranks", "protocol", "op", *SKEW_KNOBS)
    single_valued(frame, axes, "skew")
    mean = frame.group_by([a for a in axes if a in frame.columns]).agg(
        pl.col("load").mean(), pl.col("latency_us").mean())
    points = mean.group_by("ranks", "protocol", "op").agg(pl.col("load").n_unique())
    if points["load"].max() < 2:      # a line needs two skews at least
        raise InputError("DATASET", "--kind skew draws latency against the busiest die's load, "
                         "a line per op and protocol over several skews, but every line has "
                         "one; give sweep results over several skews (sweeps/skew.toml)")
    fig, panels = rank_panels(mean, 4.6)
    for ax, r, sub in panels:
        for (protocol, op), line in sorted(sub.group_by("protocol", "op"),
                                           key=lambda g: (g[0][1], g[0][0])):
            line = line.sort("load")
            ax.plot(line["load"], line["latency_us"], marker="o",
                    linestyle="-" if op == "dispatch" else "--", label=f"{op}, {protocol}")
        ax.set_title(f"{r} ranks")
        ax.set_xlabel("busiest die's copies / mean (dispatch: taken in; combine: sent)")
        ax.grid(alpha=0.3)
    panels[0][0].set_ylabel("latency (us)")
    panels[-1][0].legend()
    return fig


def die_series(dataset: str, where: str | None) -> list[tuple[str, pl.DataFrame]]:
    """What --kind dies draws from one DATASET, as (label, model.die_frame) pairs: a timeline's
    configuration (`ubepsim run --timeline`), or at most MAX_DIE_ROWS rows of a sweep
    (`--where`), each labelled by the parameters in which the rows differ; re-simulated die by
    die on the profile the file records."""
    import json

    from .engine import dataset_files, provenance
    from ..model.api import die_frame

    meta = provenance(dataset_files(dataset)[0])
    profile = _recorded_profile(meta, dataset)
    if "config" in meta:                 # a timeline: its one configuration
        if where is not None:
            raise InputError("--where", f"filters sweep results; {dataset} is a timeline of "
                             f"one configuration")
        config = json.loads(meta["config"])
        config.pop(TUNED_COLUMN, None)    # its cumsum_cores is the size that ran
        label = f"config_id {config.pop('config_id')}"
        return [(label, die_frame(config, profile))]
    frame = read_results([dataset], "dies", where)
    if frame.height > MAX_DIE_ROWS:
        raise InputError("--where", f"--kind dies draws each row's dies, at most "
                         f"{MAX_DIE_ROWS} rows; {frame.height:,} match; choose some, e.g. "
                         f"--where \"config_id = {frame['config_id'][0]}\"")
    names = [n for n in NAMES if n in frame.columns]
    differ = [n for n in names if frame[n].drop_nulls().n_unique() > 1
              or frame[n].null_count() not in (0, frame.height)]
    out = []
    for row in frame.iter_rows(named=True):
        config = {n: row[n] for n in names if row[n] is not None}
        if str(config.get("cumsum_cores", TUNED)).isdigit():   # a size, as text (tuned_as_given)
            config["cumsum_cores"] = int(config["cumsum_cores"])
        label = ", ".join(f"{n} {row[n]}" for n in differ if row[n] is not None)
        out.append((label or f"config_id {row['config_id']}", die_frame(config, profile)))
    return out


def _recorded_profile(meta: dict[str, str], dataset: str):
    """The hardware profile a file's metadata records (sweep parts and timelines carry it)."""
    import tempfile

    from ..model.profile import load_profile

    if not meta.get("profile"):
        raise InputError("DATASET", f"{dataset} records no hardware profile; --kind dies "
                         f"re-simulates what `ubepsim sweep` or `ubepsim run --timeline` "
                         f"writes")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "profile.toml"
        path.write_text(meta["profile"])
        return load_profile(path, key="DATASET")


def dies(series: Sequence[tuple[str, pl.DataFrame]]):
    """Each die's finish time (top) and the token copies it takes in and sends (bottom), a
    line per configuration ((label, model.die_frame) pairs): where the straggler is, and
    what load made it."""
    plt = _pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6.4), sharex=True,
                                      layout="constrained")
    for i, (label, frame) in enumerate(series):
        colour = f"C{i}"
        top.plot(frame["die"], frame["finish_us"], marker=".", color=colour, label=label)
        slowest = int(frame["finish_us"].arg_max())
        top.plot(slowest, frame["finish_us"][slowest], marker="o", markersize=9,
                 markerfacecolor="none", color=colour)
        bottom.plot(frame["die"], frame["copies_taken"], color=colour)
        bottom.plot(frame["die"], frame["copies_sent"], color=colour, linestyle=":")
    top.set_ylabel("finish (us)")
    top.set_title("each die's finish (circled: the slowest)", fontsize=9)
    bottom.set_ylabel("token copies")
    bottom.set_title("taken in by its experts (solid) and sent from its tokens (dotted)",
                     fontsize=9)
    bottom.set_xlabel("die")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
    top.legend(fontsize=7)
    return fig


def core_sends(frame: pl.DataFrame, die: int, path: str) -> pl.DataFrame:
    """Each sending core's Token-Sending phase on one die: core, send_us. The phase ends when
    the core has issued its last store, not when that store completes, so its slowest core is
    not the `send_max_core_us` of the results (first copy's issue to the last copy's
    completion)."""
    # a core without copies (bsp's, when a die has fewer copies than cores) has an empty send
    # phase: it does not send, and would pull the mean down (as send_mean_core_us leaves it out)
    sends = frame.filter(pl.col("phase") == "send").select(
        "core", send_us=pl.col("end_us") - pl.col("start_us")).filter(
        pl.col("send_us") > 0).sort("core")
    if sends.height == 0:
        raise InputError("DATASET", f"{path} has no core sending on die {die} (no send phase "
                         f"that is not empty): --kind core draws each sending core's send phase")
    return sends


# What the core figure's bars are, since Figure 9-style comparisons mix it up with the result
# send_max_core_us (which runs to the last store's completion, the port and hop included).
SEND_PHASE_NOTE = ("send phase: from the end of Init until the core issued its last store "
                   "(timeline phase `send`),\nnot send_max_core_us, which runs from the first "
                   "copy's issue until the last copy completed")


def core(series: Sequence[tuple[str, pl.DataFrame]]):
    """Per-core send phase bars, one panel per timeline (Figure 9): (title, core_sends) pairs."""
    plt = _pyplot()
    fig, axes = plt.subplots(len(series), 1, figsize=(10, 2.3 * len(series) + 0.9),
                             sharex=True, sharey=True, squeeze=False, layout="constrained")
    for ax, (label, sends) in zip(axes[:, 0], series):
        ax.bar(sends["core"], sends["send_us"], color="#1f77b4")
        top = float(sends["send_us"].max())
        ax.axhline(top, color="#d62728", linestyle="--", linewidth=0.8)
        ax.set_title(f"{label}: slowest core's send phase {top:.1f} us (to its last store's "
                     f"issue), mean {sends['send_us'].mean():.1f} us", fontsize=9)
        ax.set_ylabel("send phase (us)")
    axes[-1, 0].set_xlabel(f"core\n{SEND_PHASE_NOTE}", fontsize=8)
    return fig


def timeline(frame: pl.DataFrame, title: str):
    """Gantt chart of one die's cores: a bar per phase."""
    plt = _pyplot()
    n = frame["core"].max() + 1
    fig, ax = plt.subplots(figsize=(10, 0.16 * n + 1.6), layout="constrained")
    seen = set()
    for a, phase, start, end in frame.select("core", "phase", "start_us", "end_us").rows():
        if end > start:
            ax.barh(a, end - start, left=start, height=0.8, color=PHASE_COLOURS.get(phase, "k"),
                    label=None if phase in seen else phase)
            seen.add(phase)
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_xlabel("time (us)")
    ax.set_ylabel("core")
    ax.set_title(title)
    fig.legend(fontsize=7, ncol=min(len(seen), 6), loc="outside lower center")
    return fig


def save(fig, path: Path) -> None:
    """Write the figure as PNG, whole or not at all."""
    plt = _pyplot()
    try:
        with replacing(path) as tmp:
            fig.savefig(tmp, format="png", dpi=130, bbox_inches="tight")
    finally:
        plt.close(fig)
