"""Our engine next to PyTorch's own torch.distributed.pipelining (chapter 11).
"""
