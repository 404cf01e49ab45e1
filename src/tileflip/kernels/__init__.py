"""Kernels and their launchers: Triton kernels in triton_*.py, CUDA C++ in cuda/*.cu with its NVRTC loader."""
