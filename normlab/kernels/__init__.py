"""Triton kernels, launchers and autograd Functions, one module per op family."""
