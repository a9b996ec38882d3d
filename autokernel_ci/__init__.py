"""autokernel-ci: find a PyTorch model's slowest GPU kernels, optimise, verify and publish them."""

__version__ = "0.1.0"
