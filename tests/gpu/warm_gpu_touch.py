"""A module that initialises CUDA when imported: no template may contain it."""

import torch

torch.cuda.is_available()  # without NVML this is cudaGetDeviceCount: cuInit runs
