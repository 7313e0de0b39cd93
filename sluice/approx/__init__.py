"""Living within limits (STREAM §5, Jiang §4): memory limits, per-query weights and tolerable
imprecision, dynamic sampling and load shedding at the streams' input, the (FP, FN) precision
model and the allocator that spends memory where weighted precision gains most.
"""
