"""The sweep path: a grid file, or configurations given in Python, through the kernel into rows.

    params, profile        the parameters and the hardware profile (one name per concept)
    grid, expand, filters  a grid file read, checked and expanded into configurations
    workload               what routing needs besides the kernel's generator (weights, traces)
    costs                  lowering: a configuration and a profile into integer cycle costs
    kernel_io, memory      the kernel's input and output arrays; the memory a run needs
    model                  simulate, simulate_many, simulate_table: the model's Python API
    result_fields          the result columns as the host reads them (kernels/layout.py declares)
    engine, files          the sweep engine (batches into a Parquet dataset); files written whole
"""
