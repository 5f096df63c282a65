"""The paper path: the model held against the UBEP paper's numbers and claims, and fitted to
measurements.

    calibrate   fitting hardware-profile keys to measurements (the paper's or a user's)
    validate    every calibration point and qualitative claim of the paper beside the model's
    tune        the best CalCumSum group size per workload, beside Appendix A's prediction
    plot        figures of results in the shapes of the paper's
"""
