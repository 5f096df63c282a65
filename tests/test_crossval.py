"""Cross-validation (ubepsim.fit.crossval, the paper's folds in ubepsim.paper.folds, `ubepsim
calibrate --cv`): folds leave out what they say, the rules fitted on the other Figure 14 panel
are what they say, bad input stops before any fit."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import run_cli

from ubepsim.fit import calibrate as cal
from ubepsim.fit import crossval
from ubepsim.paper import cm384, folds, numbers
from ubepsim.model.profile import load_profile

KEYS = ("init_cycles", "syncall_cycles")


@pytest.fixture
def measured(tmp_path):
    """Latencies of a profile unlike cm384 (slower setup and barriers), in three sources."""
    truth = load_profile(overrides={"init_cycles": 9000, "syncall_cycles": 4000})
    # (a measured UBEP dispatch states its group: one AIV)
    rows = [dict(ranks=r, batch=b, topk=2, protocol=p, sync=s, schedule=x, cumsum_cores=1,
                 source=src)
            for r, b, p, s, x, src in [(4, 8, "bsp", "sw", "expert_block", "a"),
                                       (8, 8, "bsp", "sw", "expert_block", "a"),
                                       (4, 16, "ubep", "sp", "homogenized", "b"),
                                       (8, 16, "ubep", "sp", "homogenized", "b"),
                                       (16, 8, "bsp", "sw", "expert_block", "c")]]
    from ubepsim.model import api
    lat = [api.simulate({k: v for k, v in r.items() if k != "source"}, truth)["latency_us"]
           for r in rows]
    path = tmp_path / "measured.csv"
    lines = ["ranks,batch,topk,protocol,sync,schedule,cumsum_cores,source,latency_us"]
    lines += [",".join(str(r[k]) for k in ("ranks", "batch", "topk", "protocol", "sync",
                                          "schedule", "cumsum_cores", "source")) + f",{v:.4f}"
              for r, v in zip(rows, lat)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_rules_are_fitted_on_the_other_panel():
    """Copying the other panel's best group per row, its best constant group (least mean extra
    latency) and Appendix A's law with beta/alpha from the other panel's best groups."""
    for ranks, other in ((64, 128), (128, 64)):
        picks = folds.rules(ranks, other)
        theirs = folds.paper_cells(other)
        best = list(theirs.argmin(axis=1) + 1)
        assert picks["the other panel's best groups"] == best
        constant = picks["the other panel's best constant group"]
        assert len(set(constant)) == 1
        assert theirs.mean(axis=0)[constant[0] - 1] == theirs.mean(axis=0).min()
        law = np.array(picks["Appendix A's law, beta/alpha of the other panel"])
        # n N_exp / (K B) halves as the batch doubles: the law's picks never rise with batch
        assert np.all(np.diff(law) <= 0) and law.min() >= 1 and law.max() <= 16
        # the ratio the law carries reproduces the other panel's best groups on average
        x_other = folds.appendix_a_x(other)
        ratio = np.exp(np.mean(np.log(best) - np.log(x_other)))
        assert np.allclose(law, np.clip(np.round(ratio * folds.appendix_a_x(ranks)), 1, 16))
    # the regret of a panel's own best groups on itself is nothing
    own = list(folds.paper_cells(64).argmin(axis=1) + 1)
    assert folds.regret(64, own).max() == 0.0
    # the cell the paper reads as an outlier (batch 8, group 16) costs what its neighbour does;
    # every other cell is the paper's
    assert numbers.FIG14_PANELS[64][8][15] > 30
    assert folds.regret(64, [16] * 5)[0] == numbers.FIG14_PANELS[64][8][14]
    assert folds.regret(64, [16] * 5)[1:].tolist() == [
        numbers.FIG14_PANELS[64][b][15] for b in folds.BATCHES[1:]]


def test_the_paper_folds_leave_out_each_source_once():
    specs = folds.paper_specs(10)
    assert [s.left_out for s in specs] == [None, "Table 4", "Figure 3(b)",
                                           "Figure 14 (64 ranks)", "Figure 14 (128 ranks)"]
    assert all(s.measurements is None and s.keys == cm384.PAPER_KEYS for s in specs)
    assert set(folds.FOLDS) | set(folds.KEPT) == set(cm384.SOURCES)


def test_a_file_fold_fits_only_the_rows_it_keeps(measured):
    """The fold that leaves out source b fits exactly what a fit of the other rows finds, and
    scores every source's rows at its values."""
    spec = crossval.FoldSpec("b", KEYS, 8, str(measured))
    fold = crossval.run_fold(spec)
    frame = cal.read_measurements(measured)
    start = load_profile()
    kept = frame.filter(frame["source"] != "b")
    direct = cal.fit(cal.measurement_problem(kept, start.cores), start, KEYS, threads=1,
                     max_evaluations=8)
    assert fold.values == direct.values
    assert set(fold.scores) == {"a", "b", "c"}
    assert len(fold.scores["b"]["error"]) == 2 and len(fold.scores["c"]["error"]) == 1


def test_file_cross_validation_prints_each_source_in_and_out_of_sample(measured):
    code, out, err = run_cli("calibrate", measured, "--cv", "--fit", ",".join(KEYS),
                             "--workers", "1", "--max-evaluations", "8")
    assert code == 0, err
    for source in ("a", "b", "c"):
        block = out.split(f"{source}\n", 1)[1].splitlines()
        assert block[0].startswith("  in sample") and block[1].startswith("  out of sample")
    assert "fit without b" in err and "fit with every source" in err
    # left out, a source is predicted worse than when it was fitted (here, for all three)
    results = crossval.cross_validate(crossval.file_specs(str(measured), KEYS, "cm384", 8), 1)
    rows = crossval.summary(results)
    assert all(r["out_of_sample"]["rms_in_tolerances"] >= r["in_sample"]["rms_in_tolerances"]
               - 1e-9 for r in rows)


def test_folds_run_in_processes_as_they_run_here(measured):
    specs = crossval.file_specs(str(measured), KEYS, "cm384", 4)[:2]
    here = crossval.cross_validate(specs, 1)
    there = crossval.cross_validate(specs, 2)
    assert [r.values for r in here] == [r.values for r in there]
    assert [r.scores for r in here] == [r.scores for r in there]


@pytest.mark.parametrize("text, message", [
    ("ranks,cumsum_cores,latency_us\n8,1,30\n16,1,40\n", "fold on a source column, or on group"),
    ("ranks,cumsum_cores,source,latency_us\n8,1,a,30\n16,1,a,40\n", "holds 1 value"),
    ("ranks,batch,cumsum_cores,source,group,extra_latency_us\n8,8,1,a,g,0\n16,8,1,b,g,2\n",
     "group 'g' lies in several sources"),
])
def test_cross_validation_refuses_what_it_cannot_fold(tmp_path, text, message):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    code, _, err = run_cli("calibrate", path, "--cv", "--fit", "init_cycles")
    assert code == 2 and message in err


def test_cv_writes_no_profile_and_checks_none(measured):
    code, _, err = run_cli("calibrate", measured, "--cv", "--out", "x.toml")
    assert code == 2 and "--cv" in err
    code, _, err = run_cli("calibrate", "--paper", "--cv", "--check")
    assert code == 2 and "--cv" in err


def test_a_file_folds_on_group_without_a_source_column(tmp_path):
    path = tmp_path / "groups.csv"
    path.write_text("ranks,batch,cumsum_cores,group,extra_latency_us\n"
                    "8,8,1,b8,3.0\n8,8,4,b8,0.0\n8,32,1,b32,0.0\n8,32,4,b32,1.0\n")
    frame = cal.read_measurements(path)
    assert crossval.fold_column(frame) == "group"
    assert crossval.fold_values(frame, "group") == ["b8", "b32"]


def test_summary_puts_each_panel_beside_the_rules():
    """The table of a paper cross-validation (its scores from one profile, no fit here)."""
    scores = folds.score_paper(load_profile(), seeds=(0,))
    results = [crossval.FoldResult(f, {}, 0.0, 0, 0.0, scores) for f in (None, *folds.FOLDS)]
    rows = folds.summary(results)
    assert [r["source"] for r in rows] == list(folds.FOLDS)
    panels = [r for r in rows if folds.panel_of(r["source"])]
    assert len(panels) == 2 and all(len(r["rules"]) == 3 for r in panels)
    assert all("rules" not in r for r in rows if not folds.panel_of(r["source"]))
    text = crossval.format_summary(rows)
    assert text.count("out of sample") == 4 and text.count("rule:") == 6
    # Table 4's worst error, from the model's latencies and the paper's by rank (not from the
    # errors it is the max of)
    t4 = scores["Table 4"]
    paper = np.array([numbers.TABLE4_CANN_EP[r][0] for r in sorted(numbers.TABLE4_CANN_EP)])
    off = np.abs(np.array(t4["latency_us"]) - paper) / paper
    assert t4["max_abs_error"] == pytest.approx(off.max(), rel=1e-12)
