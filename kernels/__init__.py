"""Numba kernels of ubepsim (installed as ubepsim.kernels). Arrays and scalars in, arrays out."""
