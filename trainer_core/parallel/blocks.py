"""Find a Hugging Face model's stack of transformer blocks, generically.

FSDP wraps each block as its own unit and TP plans are applied per block, so both need the
``nn.ModuleList`` of repeated layers whatever the architecture calls it
(``model.layers`` for Llama/Mistral/Qwen, ``encoder.layer`` for BERT, ``transformer.h`` for
GPT-2, ``decoder.layers`` for OPT, ...). PEFT wrappers are looked through because the search
is over module names, not attributes.
"""

from __future__ import annotations

from torch import nn

__all__ = ["find_blocks"]

# Last name component of the blocks list in the architectures people train with us.
_BLOCK_LIST_NAMES = ("layers", "layer", "h", "blocks", "block")


def find_blocks(model: nn.Module) -> list[nn.Module]:
    """The repeated transformer blocks, in order. The longest ``nn.ModuleList`` whose name
    ends in a known block-list name and whose items all share one class wins; ``[]`` if none
    (the caller then shards only the root)."""
    best: list[nn.Module] = []
    for name, module in model.named_modules():
        if not isinstance(module, nn.ModuleList) or len(module) == 0:
            continue
        if name.rsplit(".", 1)[-1] not in _BLOCK_LIST_NAMES:
            continue
        items = list(module)
        if len({type(m) for m in items}) == 1 and len(items) > len(best):
            best = items
    return best
