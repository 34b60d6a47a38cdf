"""The distributed engine (chapter 11): one process per rank over torch.distributed
(gloo on CPU, NCCL on GPUs), the launcher, torchrun support, faults.
"""
