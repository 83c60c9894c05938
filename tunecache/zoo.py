"""A small zoo of PyTorch models with seeded random weights, for benchmarks and tests.

Everything here is written in plain PyTorch: no downloads, no torchvision (it breaks beside the
pinned torch wheel). Weights are random but deterministic (``seed``), which is all tuning needs:
the tensor programs depend on shapes and dtypes, never on weight values.

Examples
--------
>>> from tunecache import zoo
>>> zoo.names()  # doctest: +NORMALIZE_WHITESPACE
('bert_base', 'gpt2_small', 'llama_small', 'mobilenet_v2', 'resnet18', 'resnet50', 'small_cnn',
 'vgg16', 'vit_b16')
>>> m = zoo.get("small_cnn")
>>> m.module(*m.example_inputs).shape
torch.Size([1, 10])
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tunecache.errors import DependencyError, UnsupportedModelError, did_you_mean

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ["ZooModel", "get", "names", "describe"]


@dataclass(frozen=True)
class ZooModel:
    """A ready-to-import model of the zoo.

    Attributes
    ----------
    name
        Registry name with its parameters, e.g. ``"bert_base(seq_len=128, num_layers=12)"``.
    module
        The ``torch.nn.Module``, in eval mode (a live PyTorch object, not a plain value).
    example_inputs
        A tuple of example tensors to export the module with.
    description
        One line saying what the model is.
    """

    name: str
    module: torch.nn.Module
    example_inputs: tuple[torch.Tensor, ...]
    description: str


def _torch() -> Any:
    try:
        import torch
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise DependencyError(
            "the model zoo needs PyTorch: run `pip install tunecache[torch]`"
        ) from err
    return torch


# ---------------------------------------------------------------------------------------------
# Model definitions. They are built inside a function so that importing this module does not
# import torch.
# ---------------------------------------------------------------------------------------------


def _randomize_batchnorm(module: torch.nn.Module, generator: torch.Generator) -> None:
    """Give batch norms non-trivial running statistics, so that they are not identities."""
    torch = _torch()
    for m in module.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.normal_(0.0, 0.1, generator=generator)
                m.running_var.uniform_(0.5, 1.5, generator=generator)
                m.weight.uniform_(0.5, 1.5, generator=generator)
                m.bias.normal_(0.0, 0.1, generator=generator)


def _build_resnet(depth: int, num_classes: int) -> torch.nn.Module:
    _torch()  # a DependencyError when PyTorch is missing; then the imports below succeed
    import torch
    from torch import nn

    class BasicBlock(nn.Module):
        expansion = 1

        def __init__(self, cin: int, planes: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.relu = nn.ReLU()
            self.downsample: nn.Module | None = None
            if stride != 1 or cin != planes:
                self.downsample = nn.Sequential(
                    nn.Conv2d(cin, planes, 1, stride, bias=False), nn.BatchNorm2d(planes)
                )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            idt = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return self.relu(out + idt)

    class Bottleneck(nn.Module):
        expansion = 4

        def __init__(self, cin: int, planes: int, stride: int) -> None:
            super().__init__()
            width = planes
            self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3 = nn.Conv2d(width, planes * 4, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(planes * 4)
            self.relu = nn.ReLU()
            self.downsample: nn.Module | None = None
            if stride != 1 or cin != planes * 4:
                self.downsample = nn.Sequential(
                    nn.Conv2d(cin, planes * 4, 1, stride, bias=False), nn.BatchNorm2d(planes * 4)
                )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            idt = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            return self.relu(out + idt)

    block: type[BasicBlock] | type[Bottleneck]
    if depth == 18:
        block, layers = BasicBlock, [2, 2, 2, 2]
    else:
        block, layers = Bottleneck, [3, 4, 6, 3]

    class ResNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU()
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            stages = []
            cin = 64
            for i, n in enumerate(layers):
                planes = 64 * 2**i
                blocks = []
                for j in range(n):
                    blocks.append(block(cin, planes, 2 if (j == 0 and i > 0) else 1))
                    cin = planes * block.expansion
                stages.append(nn.Sequential(*blocks))
            self.layer1, self.layer2, self.layer3, self.layer4 = stages
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(cin, num_classes)
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    return ResNet()


def _build_mobilenet_v2(num_classes: int, width_mult: float) -> torch.nn.Module:
    _torch()  # a DependencyError when PyTorch is missing; then the imports below succeed
    import torch
    from torch import nn

    def divisible(v: float, divisor: int = 8) -> int:
        new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
        return new_v + divisor if new_v < 0.9 * v else new_v

    def conv_bn(cin: int, cout: int, k: int, stride: int, groups: int = 1) -> nn.Sequential:
        return nn.Sequential(
            nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU6(),
        )

    class InvertedResidual(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
            super().__init__()
            hidden = cin * expand
            self.use_res = stride == 1 and cin == cout
            layers: list[nn.Module] = []
            if expand != 1:
                layers.append(conv_bn(cin, hidden, 1, 1))
            layers += [
                conv_bn(hidden, hidden, 3, stride, groups=hidden),
                nn.Conv2d(hidden, cout, 1, bias=False),
                nn.BatchNorm2d(cout),
            ]
            self.conv = nn.Sequential(*layers)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.conv(x) if self.use_res else self.conv(x)

    settings = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]  # fmt: skip

    class MobileNetV2(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            cin = divisible(32 * width_mult)
            last = divisible(1280 * max(1.0, width_mult))
            feats: list[nn.Module] = [conv_bn(3, cin, 3, 2)]
            for t, c, n, s in settings:
                cout = divisible(c * width_mult)
                for i in range(n):
                    feats.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                    cin = cout
            feats.append(conv_bn(cin, last, 1, 1))
            self.features = nn.Sequential(*feats)
            self.classifier = nn.Linear(last, num_classes)
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out")

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.features(x)
            x = torch.nn.functional.adaptive_avg_pool2d(x, 1)
            return self.classifier(torch.flatten(x, 1))

    return MobileNetV2()


def _build_bert(num_layers: int, hidden: int, heads: int, intermediate: int, vocab: int,
                max_positions: int) -> torch.nn.Module:  # fmt: skip
    _torch()  # a DependencyError when PyTorch is missing; then the imports below succeed
    import torch
    from torch import nn
    head_dim = hidden // heads

    class SelfAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.query = nn.Linear(hidden, hidden)
            self.key = nn.Linear(hidden, hidden)
            self.value = nn.Linear(hidden, hidden)
            self.out = nn.Linear(hidden, hidden)
            self.norm = nn.LayerNorm(hidden, eps=1e-12)

        def _split(self, x: torch.Tensor) -> torch.Tensor:
            b, s, _ = x.shape
            return x.reshape(b, s, heads, head_dim).permute(0, 2, 1, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, s, _ = x.shape
            q, k = self._split(self.query(x)), self._split(self.key(x))
            v = self._split(self.value(x))
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(head_dim)
            ctx = torch.matmul(torch.softmax(scores, dim=-1), v)
            ctx = ctx.permute(0, 2, 1, 3).reshape(b, s, hidden)
            return self.norm(x + self.out(ctx))

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attention = SelfAttention()
            self.intermediate = nn.Linear(hidden, intermediate)
            self.act = nn.GELU()
            self.output = nn.Linear(intermediate, hidden)
            self.norm = nn.LayerNorm(hidden, eps=1e-12)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.attention(x)
            return self.norm(x + self.output(self.act(self.intermediate(x))))

    class BertEncoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.word = nn.Embedding(vocab, hidden)
            self.position = nn.Embedding(max_positions, hidden)
            self.token_type = nn.Embedding(2, hidden)
            self.norm = nn.LayerNorm(hidden, eps=1e-12)
            self.layers = nn.ModuleList([Layer() for _ in range(num_layers)])
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, 0.0, 0.02)

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            seq = input_ids.shape[1]
            pos = torch.arange(seq, dtype=torch.int64).unsqueeze(0)
            x = self.word(input_ids) + self.position(pos) + self.token_type(torch.zeros_like(pos))
            x = self.norm(x)
            for layer in self.layers:
                x = layer(x)
            return x

    return BertEncoder()


def _build_llama(num_layers: int, hidden: int, heads: int, kv_heads: int, intermediate: int, vocab: int,
                 max_positions: int, rope_theta: float = 10000.0) -> torch.nn.Module:
    """A LLaMA-style decoder LM: RMSNorm, rotary position embeddings, grouped-query causal
    attention (``kv_heads`` key/value heads shared by ``heads`` query heads), SwiGLU MLP, untied
    LM head. The rotary tables and the causal mask are buffers, sliced to the sequence length."""
    _torch()  # a DependencyError when PyTorch is missing; then the imports below succeed
    import torch
    from torch import nn

    head_dim = hidden // heads
    group = heads // kv_heads

    class RMSNorm(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(hidden))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight

    def rotate_half(x: torch.Tensor) -> torch.Tensor:
        x1, x2 = x[..., : head_dim // 2], x[..., head_dim // 2 :]
        return torch.cat((-x2, x1), dim=-1)

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q_proj = nn.Linear(hidden, heads * head_dim, bias=False)
            self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
            self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
            self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)

        def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            b, s, _ = x.shape
            q = self.q_proj(x).view(b, s, heads, head_dim).transpose(1, 2)
            k = self.k_proj(x).view(b, s, kv_heads, head_dim).transpose(1, 2)
            v = self.v_proj(x).view(b, s, kv_heads, head_dim).transpose(1, 2)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # grouped-query
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(head_dim) + mask
            ctx = torch.matmul(torch.softmax(scores, dim=-1), v)
            return self.o_proj(ctx.transpose(1, 2).reshape(b, s, heads * head_dim))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.input_norm = RMSNorm()
            self.attention = Attention()
            self.post_norm = RMSNorm()
            self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
            self.up_proj = nn.Linear(hidden, intermediate, bias=False)
            self.down_proj = nn.Linear(intermediate, hidden, bias=False)

        def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            x = x + self.attention(self.input_norm(x), cos, sin, mask)
            h = self.post_norm(x)
            return x + self.down_proj(torch.nn.functional.silu(self.gate_proj(h)) * self.up_proj(h))

    class Llama(nn.Module):
        cos: torch.Tensor
        sin: torch.Tensor
        causal: torch.Tensor

        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, hidden)
            self.layers = nn.ModuleList([Block() for _ in range(num_layers)])
            self.norm = RMSNorm()
            self.lm_head = nn.Linear(hidden, vocab, bias=False)
            inv_freq = 1.0 / rope_theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
            angles = torch.outer(torch.arange(max_positions, dtype=torch.float32), inv_freq)
            angles = torch.cat((angles, angles), dim=-1)
            self.register_buffer("cos", angles.cos(), persistent=False)
            self.register_buffer("sin", angles.sin(), persistent=False)
            causal = torch.full((max_positions, max_positions), float("-inf")).triu(1)
            self.register_buffer("causal", causal, persistent=False)
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, 0.0, 0.02)

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            seq = input_ids.shape[1]
            cos, sin, mask = self.cos[:seq], self.sin[:seq], self.causal[:seq, :seq]
            x = self.embed(input_ids)
            for layer in self.layers:
                x = layer(x, cos, sin, mask)
            return self.lm_head(self.norm(x))

    return Llama()


def _build_vgg16(num_classes: int, batch_norm: bool) -> torch.nn.Module:
    """VGG-16 (configuration D): thirteen 3x3 convolutions in five stages, each closed by a 2x2
    max pool, an adaptive average pool to 7x7 (so small images work), and the three-layer
    classifier (dropout is an identity in eval mode)."""
    _torch()  # a DependencyError when PyTorch is missing; then the imports below succeed
    import torch
    from torch import nn

    cfg: list[int | str] = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
                            512, 512, 512, "M"]  # fmt: skip

    class VGG(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            layers: list[nn.Module] = []
            cin = 3
            for v in cfg:
                if v == "M":
                    layers.append(nn.MaxPool2d(2, 2))
                    continue
                assert isinstance(v, int)
                layers.append(nn.Conv2d(cin, v, 3, padding=1))
                if batch_norm:
                    layers.append(nn.BatchNorm2d(v))
                layers.append(nn.ReLU())
                cin = v
            self.features = nn.Sequential(*layers)
            self.avgpool = nn.AdaptiveAvgPool2d(7)
            self.classifier = nn.Sequential(
                nn.Linear(512 * 7 * 7, 4096), nn.ReLU(), nn.Dropout(),
                nn.Linear(4096, 4096), nn.ReLU(), nn.Dropout(),
                nn.Linear(4096, num_classes),
            )  # fmt: skip
            for m in self.modules():  # torchvision's weights; biases keep PyTorch's (not zero) default
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                elif isinstance(m, nn.Linear):
                    nn.init.normal_(m.weight, 0.0, 0.01)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.avgpool(self.features(x))
            return self.classifier(torch.flatten(x, 1))

    return VGG()


def _build_vit(image_size: int, patch: int, num_layers: int, hidden: int, heads: int, mlp: int,
               num_classes: int) -> torch.nn.Module:  # fmt: skip
    """A ViT (as ViT-B/16): a patch-embedding convolution (kernel and stride ``patch``), a class
    token, learned position embeddings, pre-LN encoder blocks (fused QKV projection, GELU MLP),
    a final LayerNorm and a linear head on the class token."""
    _torch()  # a DependencyError when PyTorch is missing; then the imports below succeed
    import torch
    from torch import nn

    head_dim = hidden // heads
    tokens = (image_size // patch) ** 2 + 1

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(hidden, 3 * hidden)
            self.proj = nn.Linear(hidden, hidden)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, s, _ = x.shape
            q, k, v = (t.reshape(b, s, heads, head_dim).transpose(1, 2) for t in self.qkv(x).split(hidden, dim=-1))
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(head_dim)
            ctx = torch.matmul(torch.softmax(scores, dim=-1), v)
            return self.proj(ctx.transpose(1, 2).reshape(b, s, hidden))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1 = nn.LayerNorm(hidden, eps=1e-6)
            self.attention = Attention()
            self.norm2 = nn.LayerNorm(hidden, eps=1e-6)
            self.fc1 = nn.Linear(hidden, mlp)
            self.act = nn.GELU()
            self.fc2 = nn.Linear(mlp, hidden)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x + self.attention(self.norm1(x))
            return x + self.fc2(self.act(self.fc1(self.norm2(x))))

    class ViT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.patch_embed = nn.Conv2d(3, hidden, patch, patch)
            self.cls_token = nn.Parameter(torch.empty(1, 1, hidden).normal_(0.0, 0.02))
            self.pos_embed = nn.Parameter(torch.empty(1, tokens, hidden).normal_(0.0, 0.02))
            self.layers = nn.ModuleList([Block() for _ in range(num_layers)])
            self.norm = nn.LayerNorm(hidden, eps=1e-6)
            self.head = nn.Linear(hidden, num_classes)
            for m in self.modules():
                if isinstance(m, nn.Linear):
                    nn.init.normal_(m.weight, 0.0, 0.02)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.patch_embed(x).flatten(2).transpose(1, 2)  # (batch, patches, hidden)
            x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1) + self.pos_embed
            for layer in self.layers:
                x = layer(x)
            return self.head(self.norm(x)[:, 0])

    return ViT()


def _build_gpt2(num_layers: int, hidden: int, heads: int, vocab: int, max_positions: int) -> torch.nn.Module:
    """A GPT-2-style decoder LM: token and learned position embeddings, pre-LN blocks with causal
    self-attention (fused QKV projection; an additive ``-inf`` mask buffer, sliced to the sequence
    length, as ``llama_small``) and a 4x GELU (tanh approximation) MLP, a final LayerNorm, and an
    LM head tied to the token embedding."""
    _torch()  # a DependencyError when PyTorch is missing; then the imports below succeed
    import torch
    from torch import nn

    head_dim = hidden // heads

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c_attn = nn.Linear(hidden, 3 * hidden)
            self.c_proj = nn.Linear(hidden, hidden)

        def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            b, s, _ = x.shape
            q, k, v = (t.view(b, s, heads, head_dim).transpose(1, 2) for t in self.c_attn(x).split(hidden, dim=2))
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(head_dim) + mask
            ctx = torch.matmul(torch.softmax(scores, dim=-1), v)
            return self.c_proj(ctx.transpose(1, 2).reshape(b, s, hidden))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln_1 = nn.LayerNorm(hidden, eps=1e-5)
            self.attn = Attention()
            self.ln_2 = nn.LayerNorm(hidden, eps=1e-5)
            self.c_fc = nn.Linear(hidden, 4 * hidden)
            self.act = nn.GELU(approximate="tanh")
            self.c_proj = nn.Linear(4 * hidden, hidden)

        def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            x = x + self.attn(self.ln_1(x), mask)
            return x + self.c_proj(self.act(self.c_fc(self.ln_2(x))))

    class GPT2(nn.Module):
        causal: torch.Tensor

        def __init__(self) -> None:
            super().__init__()
            self.wte = nn.Embedding(vocab, hidden)
            self.wpe = nn.Embedding(max_positions, hidden)
            self.layers = nn.ModuleList([Block() for _ in range(num_layers)])
            self.ln_f = nn.LayerNorm(hidden, eps=1e-5)
            self.lm_head = nn.Linear(hidden, vocab, bias=False)
            causal = torch.full((max_positions, max_positions), float("-inf")).triu(1)
            self.register_buffer("causal", causal, persistent=False)
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, 0.0, 0.02)
            self.lm_head.weight = self.wte.weight  # tied, as GPT-2

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            seq = input_ids.shape[1]
            pos = torch.arange(seq, dtype=torch.int64).unsqueeze(0)
            x = self.wte(input_ids) + self.wpe(pos)
            mask = self.causal[:seq, :seq]
            for layer in self.layers:
                x = layer(x, mask)
            return self.lm_head(self.ln_f(x))

    return GPT2()


def _build_small_cnn(num_classes: int) -> torch.nn.Module:
    _torch()  # a DependencyError when PyTorch is missing; then the imports below succeed
    import torch
    from torch import nn

    class SmallCNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(3, 16, 3, 1, 1)
            self.conv2 = nn.Conv2d(16, 16, 3, 1, 1)
            self.conv3 = nn.Conv2d(16, 32, 3, 2, 1)
            self.fc = nn.Linear(32 * 8 * 8, num_classes)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.relu(self.conv1(x))
            y = torch.relu(self.conv2(y) + y)
            y = torch.relu(self.conv3(y))
            return self.fc(torch.flatten(y, 1))

    return SmallCNN()


# ---------------------------------------------------------------------------------------------
# Registry
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Entry:
    description: str
    factory: Callable[..., tuple[torch.nn.Module, tuple[torch.Tensor, ...]]]
    defaults: dict[str, Any]


def _resnet(depth: int) -> Callable[..., tuple[Any, tuple[Any, ...]]]:
    def factory(*, batch: int, image_size: int, num_classes: int) -> tuple[Any, tuple[Any, ...]]:
        torch = _torch()
        return _build_resnet(depth, num_classes), (torch.randn(batch, 3, image_size, image_size),)

    return factory


def _mobilenet(*, batch: int, image_size: int, num_classes: int,
               width_mult: float) -> tuple[Any, tuple[Any, ...]]:  # fmt: skip
    torch = _torch()
    model = _build_mobilenet_v2(num_classes, width_mult)
    return model, (torch.randn(batch, 3, image_size, image_size),)


def _bert(*, batch: int, seq_len: int, num_layers: int, hidden: int, heads: int,
          intermediate: int, vocab: int) -> tuple[Any, tuple[Any, ...]]:  # fmt: skip
    torch = _torch()
    if hidden % heads:
        raise UnsupportedModelError(f"bert_base: hidden={hidden} is not divisible by heads={heads}")
    model = _build_bert(num_layers, hidden, heads, intermediate, vocab, max(512, seq_len))
    return model, (torch.randint(0, vocab, (batch, seq_len), dtype=torch.int64),)


def _llama(*, batch: int, seq_len: int, num_layers: int, hidden: int, heads: int, kv_heads: int,
           intermediate: int, vocab: int) -> tuple[Any, tuple[Any, ...]]:  # fmt: skip
    torch = _torch()
    if hidden % heads or heads % kv_heads or (hidden // heads) % 2:
        raise UnsupportedModelError(
            f"llama_small: hidden={hidden} must split into heads={heads} of an even size, and heads into "
            f"kv_heads={kv_heads} groups"
        )
    model = _build_llama(num_layers, hidden, heads, kv_heads, intermediate, vocab, max(128, seq_len))
    return model, (torch.randint(0, vocab, (batch, seq_len), dtype=torch.int64),)


def _small_cnn(*, batch: int, image_size: int, num_classes: int) -> tuple[Any, tuple[Any, ...]]:
    torch = _torch()
    if image_size != 16:
        raise UnsupportedModelError(
            f"small_cnn takes 16x16 images only, got image_size={image_size}"
        )
    return _build_small_cnn(num_classes), (torch.randn(batch, 3, image_size, image_size),)


def _vgg16(*, batch: int, image_size: int, num_classes: int, batch_norm: bool) -> tuple[Any, tuple[Any, ...]]:
    torch = _torch()
    if image_size < 32:
        raise UnsupportedModelError(f"vgg16 halves its images five times: image_size={image_size} is below 32")
    model = _build_vgg16(num_classes, batch_norm)  # a bool: zoo.get checked it
    return model, (torch.randn(batch, 3, image_size, image_size),)


def _vit(*, batch: int, image_size: int, patch: int, num_layers: int, hidden: int, heads: int, mlp: int,
         num_classes: int) -> tuple[Any, tuple[Any, ...]]:  # fmt: skip
    torch = _torch()
    if image_size % patch or hidden % heads:
        raise UnsupportedModelError(
            f"vit_b16: image_size={image_size} must split into patches of {patch}, and hidden={hidden} into "
            f"heads={heads}"
        )
    model = _build_vit(image_size, patch, num_layers, hidden, heads, mlp, num_classes)
    return model, (torch.randn(batch, 3, image_size, image_size),)


def _gpt2(*, batch: int, seq_len: int, num_layers: int, hidden: int, heads: int,
          vocab: int) -> tuple[Any, tuple[Any, ...]]:  # fmt: skip
    torch = _torch()
    if hidden % heads:
        raise UnsupportedModelError(f"gpt2_small: hidden={hidden} is not divisible by heads={heads}")
    model = _build_gpt2(num_layers, hidden, heads, vocab, max(1024, seq_len))
    return model, (torch.randint(0, vocab, (batch, seq_len), dtype=torch.int64),)


_REGISTRY: dict[str, _Entry] = {
    "resnet18": _Entry(
        "ResNet-18 (basic blocks), NCHW float32",
        _resnet(18),
        {"batch": 1, "image_size": 224, "num_classes": 1000},
    ),
    "resnet50": _Entry(
        "ResNet-50 (bottleneck blocks), NCHW float32",
        _resnet(50),
        {"batch": 1, "image_size": 224, "num_classes": 1000},
    ),
    "mobilenet_v2": _Entry(
        "MobileNetV2 (inverted residuals, depthwise convolutions), NCHW float32",
        _mobilenet,
        {"batch": 1, "image_size": 224, "num_classes": 1000, "width_mult": 1.0},
    ),
    "bert_base": _Entry(
        "BERT-base encoder (embeddings + transformer layers, no mask, no pooler), int64 token ids"
        " -> float32 hidden states; identical layers give identical tuning tasks",
        _bert,
        {"batch": 1, "seq_len": 128, "num_layers": 12, "hidden": 768, "heads": 12,
         "intermediate": 3072, "vocab": 30522},  # fmt: skip
    ),
    "llama_small": _Entry(
        "a small LLaMA-style decoder LM (RMSNorm, rotary embeddings, grouped-query causal attention, "
        "SwiGLU), int64 token ids -> float32 logits; identical layers give identical tuning tasks",
        _llama,
        {"batch": 1, "seq_len": 64, "num_layers": 4, "hidden": 256, "heads": 8, "kv_heads": 2,
         "intermediate": 688, "vocab": 4096},  # fmt: skip
    ),
    "small_cnn": _Entry(
        "a tiny CNN for tests: three conv2d+relu (one residual add), flatten, dense; 16x16 input",
        _small_cnn,
        {"batch": 1, "image_size": 16, "num_classes": 10},
    ),
    "vgg16": _Entry(
        "VGG-16 (configuration D: thirteen 3x3 convolutions, max pools, adaptive average pool to 7x7, "
        "three dense layers), NCHW float32; batch_norm=1 adds a batch norm after each convolution",
        _vgg16,
        {"batch": 1, "image_size": 224, "num_classes": 1000, "batch_norm": False},
    ),
    "vit_b16": _Entry(
        "ViT-B/16 (patch-embedding convolution, class token, learned position embeddings, pre-LN encoder "
        "blocks with GELU MLPs, classification head), NCHW float32; identical layers give identical tuning tasks",
        _vit,
        {"batch": 1, "image_size": 224, "patch": 16, "num_layers": 12, "hidden": 768, "heads": 12,
         "mlp": 3072, "num_classes": 1000},  # fmt: skip
    ),
    "gpt2_small": _Entry(
        "a GPT-2-style decoder LM (learned position embeddings, pre-LN blocks, causal attention, tanh-GELU "
        "MLP, LM head tied to the embedding), int64 token ids -> float32 logits",
        _gpt2,
        {"batch": 1, "seq_len": 128, "num_layers": 12, "hidden": 768, "heads": 12, "vocab": 50257},
    ),
}


def names() -> tuple[str, ...]:
    """Return the names of the zoo's models, sorted."""
    return tuple(sorted(_REGISTRY))


def describe(name: str) -> str:
    """Return the description and default parameters of one zoo model.

    Raises
    ------
    UnsupportedModelError
        If ``name`` is not in the zoo.
    """
    entry = _entry(name)
    params = ", ".join(f"{k}={v!r}" for k, v in entry.defaults.items())
    return f"{name}({params}): {entry.description}"


def _entry(name: str) -> _Entry:
    try:
        return _REGISTRY[name]
    except KeyError:
        hint = did_you_mean(name, names())
        hint = f"{hint} " if hint else ""
        raise UnsupportedModelError(
            f"unknown zoo model {name!r}; {hint}choose one of {', '.join(names())}"
        ) from None


_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def _checked_param(model: str, key: str, value: Any, default: Any) -> Any:
    """``value`` as the type of the parameter's ``default`` (the command line passes ``"yes"``,
    ``"64"``): a flag a boolean, a size a positive integer, a factor a positive number.

    Raises
    ------
    UnsupportedModelError
        Naming the parameter, what it takes and its default, where ``value`` is none of that (a
        model built from ``seq_len="abc"`` failed deep in PyTorch, blaming the factory).
    """
    text = str(value).strip().lower()
    if isinstance(default, bool):
        got: Any = value if isinstance(value, bool) else (True if text in _TRUE else False if text in _FALSE
                                                           else None)
        what = "true or false"
    elif isinstance(default, int):
        try:
            got = value if isinstance(value, int) and not isinstance(value, bool) else int(text)
        except ValueError:
            got = None
        got = got if got is not None and got >= 1 else None
        what = "a positive integer"
    else:
        try:
            got = None if isinstance(value, bool) else float(value)
        except (TypeError, ValueError):
            got = None
        got = got if got is not None and got > 0 and got != float("inf") else None
        what = "a positive number"
    if got is None:
        raise UnsupportedModelError(
            f"zoo model {model!r}: {key} takes {what} (default {default!r}), got {value!r}; "
            f"e.g. {model}:{key}={str(default).lower() if isinstance(default, bool) else default}"
        )
    return got


def get(name: str, *, seed: int = 0, **params: Any) -> ZooModel:
    """Build a zoo model with seeded random weights, in eval mode.

    Parameters
    ----------
    name
        One of :func:`names`.
    seed
        Seed of the weights and of the example inputs. The global torch RNG is left untouched.
    **params
        Overrides of the model's defaults (see :func:`describe`), e.g. ``seq_len=64`` or
        ``num_layers=1`` for ``bert_base``, ``batch=8`` or ``image_size=160`` for CNNs.

    Returns
    -------
    ZooModel
        The module and example inputs.

    Raises
    ------
    UnsupportedModelError
        If ``name`` is unknown, a parameter is not one the model takes, or its value is not of
        the default's kind (a flag, a positive integer, a positive number).
    DependencyError
        If PyTorch is not installed.

    Examples
    --------
    >>> get("bert_base", seq_len=64, num_layers=1).example_inputs[0].shape
    torch.Size([1, 64])
    """
    entry = _entry(name)
    unknown = sorted(set(params) - set(entry.defaults))
    if unknown:
        raise UnsupportedModelError(
            f"zoo model {name!r} takes no parameter {', '.join(unknown)}; "
            f"it takes {', '.join(entry.defaults)}"
        )
    kwargs = {**entry.defaults, **{k: _checked_param(name, k, v, entry.defaults[k]) for k, v in params.items()}}
    torch = _torch()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module, inputs = entry.factory(**kwargs)
        gen = torch.Generator().manual_seed(seed + 1)
        _randomize_batchnorm(module, gen)
    module.eval()
    for p in module.parameters():
        p.requires_grad_(False)
    # The name shows the values as given (``batch_norm=1``), as it did before they were checked.
    label = ", ".join(f"{k}={params[k]!r}" for k in entry.defaults if k in params)
    full_name = f"{name}({label})" if label else name
    return ZooModel(full_name, module, tuple(inputs), entry.description)
