"""Host runtime: the CUDA driver and launching."""
