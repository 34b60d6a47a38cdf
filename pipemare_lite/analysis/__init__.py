"""Analysis without running tensors (chapters 01-10): the simulator, weight versions and
delays, memory, closed forms, theory. Torch-free, except curvature.
"""
