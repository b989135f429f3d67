"""A PyTorch MLP training script, run by tracegrad: only the imports differ.

Written as a PyTorch user writes one (nn.Module, CrossEntropyLoss, Adam with weight decay,
a StepLR schedule, gradient clipping, no_grad evaluation); swap the three import lines for
`import torch`, `from torch import nn, optim` and `import torch.nn.functional as F` and PyTorch
runs it unchanged. Data: two interleaved spirals, made with randn.

    python examples/pytorch_mlp.py [--epochs 30] [--batch-size 64] [--lr 0.01] [--seed 0]
"""

import argparse
import math

import tracegrad as torch
import tracegrad.nn.functional as F
from tracegrad import nn, optim


def make_spirals(n, noise=0.15):
    """n points on two spirals; label = which spiral."""
    t = torch.rand(n) * 3 * math.pi + 0.5
    label = (torch.rand(n) > 0.5).long()
    sign = label.float() * 2 - 1
    x = torch.stack([t * torch.cos(t) * sign, t * torch.sin(t) * sign], dim=1) / 6
    return x + noise * torch.randn(n, 2), label


class MLP(nn.Module):
    def __init__(self, in_features, hidden, classes):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, classes)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = torch.tanh(self.fc2(x))
        return self.fc3(x)


def evaluate(model, x, y):
    model.eval()
    with torch.no_grad():
        logits = model(x)
        loss = F.cross_entropy(logits, y).item()
        accuracy = (logits.argmax(dim=1) == y).float().mean().item()
    model.train()
    return loss, accuracy


def train(epochs=30, batch_size=64, lr=1e-2, seed=0, log=print):
    torch.manual_seed(seed)
    x_train, y_train = make_spirals(2048)
    x_test, y_test = make_spirals(512)
    device = "cpu"
    model = MLP(2, 64, 2).to(device)
    criterion = nn.CrossEntropyLoss(label_smoothing=0.05)
    optimizer = optim.Adam(model.parameters(), lr=lr, weight_decay=1e-4)
    scheduler = optim.lr_scheduler.StepLR(optimizer, step_size=10, gamma=0.5)
    losses = []
    for epoch in range(epochs):
        perm = torch.randperm(x_train.size(0))
        for i in range(0, x_train.size(0), batch_size):
            idx = perm[i : i + batch_size]
            xb, yb = x_train[idx].to(device), y_train[idx].to(device)
            optimizer.zero_grad()
            loss = criterion(model(xb), yb)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
            optimizer.step()
            losses.append(loss.item())
        scheduler.step()
        if log and (epoch + 1) % 5 == 0:
            test_loss, test_acc = evaluate(model, x_test, y_test)
            log(
                f"epoch {epoch + 1:3d}  lr {scheduler.get_last_lr()[0]:.4f}  "
                f"train loss {sum(losses[-32:]) / len(losses[-32:]):.4f}  "
                f"test loss {test_loss:.4f}  test accuracy {test_acc:.3f}"
            )
    return model, losses, evaluate(model, x_test, y_test)


def parser():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--epochs", type=int, default=30, help="passes over the data (%(default)s)")
    p.add_argument("--batch-size", type=int, default=64, help="points per step (%(default)s)")
    p.add_argument("--lr", type=float, default=1e-2, help="Adam's learning rate (%(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seeds data and weights (%(default)s)")
    return p


if __name__ == "__main__":
    args = parser().parse_args()
    train(args.epochs, args.batch_size, args.lr, args.seed)
