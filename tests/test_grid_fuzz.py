"""Any grid file, however wrong, loads or is refused with an InputError naming a key."""

from __future__ import annotations

import json
import math

from hypothesis import HealthCheck, example, given, settings, strategies as st

from ubepsim.errors import InputError
from ubepsim.sweep.grid import load_grid
from ubepsim.model.params import NAMES, PARAM_BY_NAME
from ubepsim.model.profile import FIELDS


def toml_key(k: str) -> str:
    return json.dumps(k, ensure_ascii=False)


def toml(v) -> str:
    """A value in TOML's syntax (inline tables for dicts)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v == math.inf else
                                            "-inf" if v == -math.inf else repr(v))
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[" + ", ".join(toml(x) for x in v) + "]"
    return "{ " + ", ".join(f"{toml_key(k)} = {toml(x)}" for k, x in v.items()) + " }"


CHOICES = sorted({c for p in PARAM_BY_NAME.values() if p.choices for c in p.choices})
plausible = st.one_of(st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128, 0.5, 0.9, 1.2]),
                      st.sampled_from(CHOICES))
scalars = st.one_of(
    plausible, plausible, plausible,
    st.integers(-3, 300), st.sampled_from([0, 2 ** 63, -2 ** 63, 10 ** 400]),
    st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
    st.sampled_from(["", "x", "a.parquet", "topk <= experts"]),
    st.text(st.characters(exclude_categories=("Cs",)), max_size=4))
ranges = st.fixed_dictionaries(
    {"range": st.lists(scalars, min_size=0, max_size=3)},
    optional={"step": scalars, "factor": scalars, "stride": scalars})
specs = st.one_of(st.lists(plausible, min_size=1, max_size=3), scalars,
                  st.lists(scalars, max_size=3), ranges,
                  st.lists(st.lists(scalars, max_size=2), max_size=2))


def keys(known):
    """Mostly keys the table knows, sometimes any."""
    return st.integers(0, 19).flatmap(lambda i: st.sampled_from(known) if i else st.text(
        st.characters(exclude_categories=("Cs",)), min_size=1, max_size=3))


operands = st.sampled_from(list(NAMES) + ["1", "POWER(2, 70)", "1e400", "'sw'", "-1", "0.5",
                                          "(1, 2)", "('sw', 'dc')", "1e308", "(2 - 2)", "NULL",
                                          "AVG(topk)", "SQRT(-1)", "2 ** 70", "[1, 2]"])
filters = st.one_of(
    st.text(st.characters(exclude_categories=("Cs",)), max_size=12),
    st.builds(lambda a, op, b: f"{a} {op} {b}", operands,
              st.sampled_from(["<", "<=", "=", "<>", "IN", "NOT IN", "+", "/", "//", "%", "AND",
                               "OR", "IS", "LIKE", "BETWEEN 1 AND"]), operands))


@st.composite
def grids(draw) -> str:
    # filters most often: they are evaluated last, after everything else was accepted
    sweep = draw(st.dictionaries(keys(["seeds", "filter", "filter", "filter"]),
                                 st.one_of(specs, filters, filters), max_size=2))
    if not draw(st.integers(0, 9)):
        sweep["out" if draw(st.booleans()) else "profile"] = draw(scalars)
    if draw(st.integers(0, 9)):
        sweep["name"] = "t"
    grid = draw(st.dictionaries(keys(list(NAMES)), specs, max_size=4))
    zips = draw(st.lists(st.dictionaries(keys(list(NAMES)), specs, max_size=3), max_size=2))
    profile = {} if draw(st.integers(0, 3)) else draw(st.dictionaries(
        keys(list(FIELDS)), st.one_of(scalars, st.lists(scalars, max_size=2), st.dictionaries(
            st.sampled_from(["local", "one_hop", "four_hop"]), scalars, max_size=2)),
        max_size=2))
    text = "[sweep]\n" + "".join(f"{toml_key(k)} = {toml(v)}\n" for k, v in sweep.items())
    text += "[grid]\n" + "".join(f"{toml_key(k)} = {toml(v)}\n" for k, v in grid.items())
    for z in zips:
        text += "[[zip]]\n" + "".join(f"{toml_key(k)} = {toml(v)}\n" for k, v in z.items())
    text += "[profile]\n" + "".join(f"{toml_key(k)} = {toml(v)}\n" for k, v in profile.items())
    return text


@settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))
@given(grids())
# found by this test: a key holding a newline made a two-line message, integers past the
# floats' range raised OverflowError, and a file name holding a NUL raised ValueError
@example('[sweep]\n"\\n" = 0\n')
@example('[sweep]\nname = "t"\n[grid]\ntrace = ["\\u0000"]\n')
@example('[sweep]\nname = "t"\nprofile = "a\\u0000"\n')
@example('[sweep]\nname = "t"\n[grid]\nzipf_s = [1%s]\n' % ("0" * 400))
@example('[sweep]\nname = "t"\nfilter = "10 ** 400 / 3 > batch"\n')
def test_any_grid_loads_or_is_refused_naming_a_key(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("g") / "grid.toml"
    path.write_text(text)
    try:
        load_grid(path)
    except InputError as e:
        assert e.key and "\n" not in str(e), str(e)
