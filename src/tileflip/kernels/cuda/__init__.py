"""The CUDA C++ kernels (``*.cu``), compiled by NVRTC on first use (``nvrtc.py``), and their launchers."""
