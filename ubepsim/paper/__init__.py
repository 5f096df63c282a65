"""The paper path: the model held against the UBEP paper's numbers and claims, and fitted to
measurements.

    numbers     the paper's numbers and the setups they were measured on, written once
    calibrate   the fitter: hardware-profile keys fitted to measurements, a user's or the paper's
    cm384       the paper's numbers as a calibration problem: the built-in profile's refit
    validate    every calibration point and qualitative claim of the paper beside the model's
    tune        the best CalCumSum group size per workload, beside Appendix A's prediction
    plot        figures of results in the shapes of the paper's
"""
