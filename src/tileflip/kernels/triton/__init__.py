"""The Triton kernels and their one launch path (``launch.py``)."""
