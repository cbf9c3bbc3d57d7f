"""GPU kernels (Triton), installed as fastmmeval.triton_kernels; each has a torch/numpy reference."""
