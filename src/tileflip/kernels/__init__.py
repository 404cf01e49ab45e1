"""Kernels and their launchers. Each takes a launch description (``tileflip.plan``) and imports no policy:
Triton kernels in ``triton/``, CUDA C++ in ``cuda/`` with its NVRTC loader."""
