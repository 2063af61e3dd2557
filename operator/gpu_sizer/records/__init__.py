"""What measurement records say: whether a shared GPUMeasurement may be reused and by whom
(sharing), whether its figures are plausible (checks), the correction factors learned from them
(calibration) and the estimate's error against them (accuracy). Pure.
"""
