"""The sweep path: a grid file through the model into a Parquet dataset, and its figures.

    grid, expand, filters  a grid file read, checked and expanded into configurations
    engine                 the sweep engine: batches of configurations into a Parquet dataset
    plot                   figures of a dataset or a timeline in the shapes of the paper's
"""
