"""A module that initialises CUDA when imported: no template may contain it."""

import torch

# Not torch.cuda.is_available(): with PYTORCH_NVML_BASED_CUDA_CHECK=1 (which importing
# DeepSpeed sets) it asks NVML and never runs cuInit.
torch.cuda.init()
