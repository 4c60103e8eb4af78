"""nala for PyTorch: NaLa attention ("Norm×Direction", NaLaFormer, ICML 2026) as a differentiable,
torch.compile-able custom op over nala's CPU path and CUDA kernels, the gated NaLa block as an
nn.Module, and DiT/SiT/NaLaDiT/NaLaSiT models that load nala's checkpoints.

    import torch, nala
    o = nala.attention(q, k, v)                 # q, k, v (B, H, N, d)
    block = nala.NaLaAttention(384, 6)          # the gated block, x (B, N, 384)
    model = nala.load_checkpoint("runs/x")      # a nala run's EMA model
"""
from ._ops import FEATURE_MAPS, attention, attention_packed, cuda_kernels_built
from .models import DiT, load_checkpoint, model_from_config
from .modules import NaLaAttention

__version__ = "0.1.0"
__all__ = ["attention", "attention_packed", "cuda_kernels_built", "FEATURE_MAPS", "NaLaAttention", "DiT", "load_checkpoint", "model_from_config"]
