"""The model behind ptview's test traces (gen_traces.py writes them)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc1 = nn.Linear(dim, 2 * dim)
        self.fc2 = nn.Linear(2 * dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        h = F.gelu(self.fc1(x))
        h = self.fc2(h)
        return self.norm(x + h)


class Net(nn.Module):
    def __init__(self, dim=8, depth=2):
        super().__init__()
        self.blocks = nn.ModuleList([Block(dim) for _ in range(depth)])
        self.head = nn.Linear(dim, 4)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return torch.softmax(self.head(x), dim=-1)
