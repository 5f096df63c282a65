"""Fitting the model: hardware-profile keys fitted to measurements, judged where they were not
fitted, and UBEP's CalCumSum group tuned per workload.

    calibrate   the fitter: profile keys fitted to measurements (a user's, or the paper's)
    crossval    cross-validation: each source left out, refitted, predicted
    tune        the best CalCumSum group size per workload, beside Appendix A's prediction
"""
