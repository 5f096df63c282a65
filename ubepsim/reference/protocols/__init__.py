"""The twin of kernels/protocols: a module per protocol, of the same name, with the twin of the
code that protocol alone runs (its mechanisms are the kernel's table, which the twin reads:
state.Run.mech)."""
