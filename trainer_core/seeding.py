"""``set_seed``: Python's, NumPy's and torch's global generators (every device), as
``transformers.set_seed(seed)`` does with its default ``deterministic=False``.

Our own because ``transformers.set_seed`` lives in ``transformers.trainer_utils``, whose import
pulls PEFT, bitsandbytes, accelerate, DeepSpeed and MLflow into every job (issue #33).
"""

from __future__ import annotations

import random

import numpy as np
import torch

__all__ = ["set_seed"]


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # the CPU generator and every CUDA device's (lazily)
    torch.cuda.manual_seed_all(seed)
