"""`python -m torch.distributed.launch`: the older launcher, torchrun's with `--use-env` (without
it, each rank's script is given `--local-rank=N`, as PyTorch's gives it)."""

import sys

from tracegrad.torch.distributed.run import main as _run_main


def main() -> int:
    return _run_main(sys.argv[1:], legacy=True)


if __name__ == "__main__":
    sys.exit(main())
