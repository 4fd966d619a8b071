"""γ: the aggregate operator, and its fused forms over a RANGE window (an aggregate index per
window, seed 001) and a SLIDE window (one answer per slide instant)."""
