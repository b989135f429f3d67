"""`torch.backends.cpu`: which vector instructions PyTorch's own CPU kernels were built for.
tracegrad's kernels are compiled for the host by Numba, and it has no hand-vectorized integer
kernels of the kind the answer switches on (torchvision's uint8 resize), so it answers
"DEFAULT", PyTorch's answer without them."""


def get_cpu_capability() -> str:
    return "DEFAULT"
