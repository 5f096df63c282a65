"""Public entry points of the model: one configuration, or a table of them.

    simulate(config, profile) -> dict          one configuration (results + parameters)
    simulate_table(points, profile) -> frame   many configurations through the parallel kernel

`points` is a polars DataFrame with one column per parameter (ubepsim.params.NAMES), values
resolved (experts and aivs filled in, enums as their names). The result frame has the same
rows in the same order: every parameter, `config_id`, then every field of ubepsim.results.
A row depends only on its own parameters (never on the rest of the batch or on threads).
"""
