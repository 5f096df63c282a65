"""The paper: the UBEP paper's numbers, the built-in presets' provenance, and the model held
against both.

    numbers     the paper's numbers and the setups they were measured on, written once
    cm384       the paper's numbers as a calibration problem: the built-in profile's refit
    h800        Table 4's DeepEP column as the h800 preset's calibration problem
    folds       the paper's cross-validation folds and how each is scored
    validate    every calibration point and qualitative claim of the paper beside the model's
"""
