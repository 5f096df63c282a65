"""docs/reference.md, generated from the code's own field help, so the reference cannot drift.

    python -m ubepsim.docs > docs/reference.md

Parameters come from ubepsim.model.params.PARAMS, result columns from
ubepsim.model.result_fields.RESULTS (with config_id, whose help is its property's docstring, and
cumsum_tuned, params.TUNED_HELP),
timeline phases from kernels/layout.py (where results and phases are declared), hardware keys
from ubepsim.model.profile.FIELDS with the built-in profile's values. A test holds
docs/reference.md equal to `reference()`.
"""

from __future__ import annotations

import textwrap
import tomllib
from importlib import resources
from pathlib import Path

from .kernels import protocols
from .kernels.layout import (COMBINE_TIMELINE, COUNT, DISPATCH_TIMELINE, LAYER_GAP,
                             TIMELINE_PHASES)
from .model.params import (PARAMS, STATED_DEFAULT, TUNED, TUNED_COLUMN, TUNED_HELP, Config, Op,
                           Protocol)
from .model.profile import (BUILTIN, FIELDS, HOP_CLASSES, MAX_GBPS, MAX_LATENCY_NS,
                            MAX_TIER_DIES, MAX_TIERS, MIN_GBPS, builtin_values)
from .model.result_fields import RESULTS

KINDS = {int: "integer", float: "number", str: "name", Path: "file", list: "list of integers",
         dict: "table"}


def _number(v: float) -> str:
    """A value as a reader writes it: 2^20 and 2^63 - 1 for the code's powers of two, 1e9 for
    its round large floats, thousands separated otherwise."""
    if not float(v).is_integer():
        return f"{v:g}"
    n = int(v)
    if n >= 1 << 16:
        if n & (n - 1) == 0:
            return f"2^{n.bit_length() - 1}"
        if n & (n + 1) == 0:
            return f"2^{n.bit_length()} - 1"
        if float(f"{n:.0e}") == n:
            return f"{n:.0e}".replace("e+0", "e").replace("e+", "e")
    return f"{n:,}"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _parameters() -> list[str]:
    rows = ["| parameter | flag | type | default | allowed | meaning |", "|---|---|---|---|---|---|"]
    for p in PARAMS:
        meaning = p.described
        if p.stated_default is not None:   # the code or the profile decides it: in words
            default = p.stated_default
            meaning = STATED_DEFAULT.sub("", meaning)
        elif p.default is None:
            default = "computed"
        else:
            default = "none" if p.default == "" else f"`{p.default}`"
        if p.choices:
            allowed = ", ".join(f"`{c}`" for c in p.choices)
        elif p.tunable:
            allowed = f"{_number(p.minimum)} to `cores` - 1, or `{TUNED}`"
        elif p.minimum is not None:
            allowed = f"{_number(p.minimum)} to {_number(p.maximum)}"
        elif p.kind is list:
            allowed = "integers of at least 0, one per rank"
        else:
            allowed = "a file"
        rows.append(f"| `{p.name}` | `{p.flag}` | {KINDS[p.kind]} | {default} | {allowed} | "
                    f"{_cell(meaning)} |")
    return rows


def _results() -> list[str]:
    rows = ["| column | type | unit | given by | meaning |", "|---|---|---|---|---|",
            f"| `config_id` | integer | | every op | {_cell(Config.config_id.__doc__)} |",
            f"| `{TUNED_COLUMN}` | boolean | | every op | {_cell(TUNED_HELP)} |"]
    for f in RESULTS:
        kind = {"f8": "number", "i8": "integer"}[f.dtype]
        unit = "" if f.unit == COUNT else f.unit
        rows.append(f"| `{f.name}` | {kind} | {unit} | {_ops(f.ops)} | {_cell(f.help)} |")
    return rows


def _ops(ops) -> str:
    """The ops that give a result or run a phase, in words."""
    return "every op" if set(ops) == set(Op) else ", ".join(Op(o).name for o in ops)


def _timeline() -> list[str]:
    """Each core's phases by op and role, then what each phase is."""
    rows = ["| op | role | phases, in order |", "|---|---|---|"]
    for role, phases in DISPATCH_TIMELINE.items():
        rows.append(f"| dispatch | `{role}` | {', '.join(phases)} |")
    combine_roles = {Protocol.bsp: "`bsp`", Protocol.ubep: "`token`, and in a layer `cumsum`",
                     Protocol.deepep_ll: "`fixed`"}
    for protocol in Protocol:
        phases = COMBINE_TIMELINE[protocols.combine_steps(protocol)]
        rows.append(f"| combine | {combine_roles[protocol]} | {', '.join(phases)} |")
    rows.append(f"| layer | each | its dispatch role's, then {LAYER_GAP}, then combine's |")
    rows += ["", "| phase | the core's work |", "|---|---|"]
    rows += [f"| `{name}` | {_cell(text)} |" for name, text in TIMELINE_PHASES.items()]
    return rows


def _hardware() -> list[str]:
    cm384 = builtin_values("cm384")
    rows = ["| key | type | cm384 | allowed | meaning |", "|---|---|---|---|---|"]
    for key, f in FIELDS.items():
        value = cm384[key]
        kind = KINDS[f.kind]
        if f.kind is dict:
            shown = ", ".join(f"{h} {_number(value[h])}" for h in HOP_CLASSES)
            allowed = f"each 0 to {_number(MAX_LATENCY_NS)}"
        elif key == "tier_gbps":
            shown = "[" + ", ".join(map(_number, value)) + "]"
            allowed = (f"at most one per tier of tier_sizes, each {_number(MIN_GBPS)} to "
                       f"{_number(MAX_GBPS)}")
            kind = "list of numbers"
        elif f.kind is list:
            shown = "[" + ", ".join(map(str, value)) + "]"
            allowed = f"at most {MAX_TIERS} sizes, each 1 to {_number(MAX_TIER_DIES)}"
        elif f.kind is str:
            shown = value
            allowed = ", ".join(HOP_CLASSES[1:])
            kind = "hop class"
        else:
            shown = _number(value)
            allowed = f"{_number(f.minimum)} to {_number(f.maximum)}"
        rows.append(f"| `{key}` | {kind} | {shown} | {allowed} | {_cell(f.help)} |")
    rows += ["", "The built-in profiles: `cm384` is calibrated (docs/calibration.md); the others "
             "are presets of other fabrics, each taking the keys it does not set from cm384 "
             "(its `[takes]` table lists them), but for `h800`, a GPU cluster whose every key "
             "is its own (its file says where each comes from; two are fitted to Table 4's "
             "DeepEP column).", "",
             "| profile | what it sets beside what it takes from cm384 |", "|---|---|"]
    for name in BUILTIN[1:]:
        doc = tomllib.loads(resources.files("ubepsim").joinpath("profiles", f"{name}.toml")
                            .read_text())
        if "takes" not in doc:
            rows.append(f"| `{name}` | every key (ubepsim/profiles/{name}.toml) |")
            continue
        own = {**{k: v for k, v in doc["hardware"].items() if k != "latency_ns"},
               **{f"latency_ns.{h}": v for h, v in doc["hardware"].get("latency_ns", {}).items()}}
        shown = (f"`{k}` = {v if isinstance(v, list) else _number(v)}" for k, v in own.items())
        rows.append(f"| `{name}` | {', '.join(shown)} |")
    return rows


def reference() -> str:
    """The text of docs/reference.md."""
    parts = [
        "# Reference: parameters, result columns, hardware keys",
        "",
        "Generated by `python -m ubepsim.docs > docs/reference.md` from the help the code "
        "carries for each field; a test keeps this file equal to that output, so edit the help "
        "in the code, not this file.",
        "",
        "## Parameters",
        "",
        "One name per parameter: the key of a grid's `[grid]` table, the flag of `ubepsim run` "
        "and `ubepsim tune`, the key of a dict given to "
        "`ubepsim.simulate`, and a column of every result row. The hardware profile is not a "
        "parameter: `--profile` picks it, and a dataset records it in its metadata.",
        "",
        *_parameters(),
        "",
        "## Result columns",
        "",
        "A row of `ubepsim sweep`, `ubepsim run --json`, `ubepsim.simulate` or "
        "`ubepsim.simulate_many` holds every parameter above, then these columns. Times are in "
        "microseconds; what each phase column counts is specified in "
        "[the model](model.md#results). A column its row's op does not give (\"given by\") "
        "is 0.",
        "",
        *_results(),
        "",
        "## Timeline phases",
        "",
        "A row of `ubepsim run --timeline FILE.parquet` is one phase of one core of one die "
        "([the model](model.md#timelines)). A core's phases come in the order below and abut "
        "(one's `end_us` is the next one's `start_us`); a phase may be empty. Under ubep, "
        "Cores below `cumsum_cores` have dispatch's role `cumsum` (the CalCumSum group), the "
        "others `token`; under bsp every core has role `bsp`.",
        "",
        *_timeline(),
        "",
        "## Hardware profile keys",
        "",
        "The keys of a profile file's `[hardware]` table and of a grid's `[profile]` table; "
        "a file may set any subset, the rest keep the built-in `cm384` value shown.",
        "",
        *_hardware(),
    ]
    # prose wrapped as the hand-written docs are; table rows and headings stay one line each
    return "\n".join(p if p.startswith(("|", "#")) else textwrap.fill(p, 100)
                     for p in parts) + "\n"


if __name__ == "__main__":
    print(reference(), end="")
