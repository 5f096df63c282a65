"""The model of one configuration: what it is, what it costs, and the kernel run on it.

    params, profile        the parameters and the hardware profile (one name per concept)
    workload, routings     what routing needs besides the kernel's generator: expert weights,
                           tokens per die; traces: a routing read from a Parquet file
    costs                  lowering: a configuration and a profile into integer cycle costs
    kernel_io, memory      the kernel's input and output arrays; the memory a run needs
    result_fields          the result columns as the host reads them (kernels/layout.py declares)
    api                    simulate, simulate_many, simulate_table, die_frame: the Python API
"""
