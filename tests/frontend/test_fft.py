"""`tracegrad.fft` (torch.fft's meanings, frontend/fft.py): the lengths, dimensions, norms and
dtypes PyTorch gives, gradients against finite differences, and spectral layers training the
same traced as eager."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
from tests.conftest import check_grad
from tracegrad import fft, nn

rng = np.random.default_rng(0)


def complex_normal(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


X = rng.standard_normal((3, 4, 6))
Z = complex_normal(3, 4, 6)

# (tracegrad's call, NumPy's: the same transform, with PyTorch's defaults spelled out)
VALUES = {
    "fft": (lambda x: fft.fft(x), lambda a: np.fft.fft(a), Z),
    "fft n dim": (lambda x: fft.fft(x, n=5, dim=0), lambda a: np.fft.fft(a, 5, 0), Z),
    "fft of real": (lambda x: fft.fft(x, norm="ortho"), lambda a: np.fft.fft(a, norm="ortho"), X),
    "ifft": (lambda x: fft.ifft(x, 8, norm="forward"),
             lambda a: np.fft.ifft(a, 8, norm="forward"), Z),
    "fft2": (lambda x: fft.fft2(x), lambda a: np.fft.fft2(a), Z),
    "ifft2 s": (lambda x: fft.ifft2(x, s=(3, -1)), lambda a: np.fft.ifft2(a, s=(3, 6)), Z),
    "fftn": (lambda x: fft.fftn(x), lambda a: np.fft.fftn(a), Z),
    "fftn s": (lambda x: fft.fftn(x, s=(2, 7)), lambda a: np.fft.fftn(a, s=(2, 7), axes=(1, 2)), Z),
    "ifftn dim": (lambda x: fft.ifftn(x, dim=(0, 2)), lambda a: np.fft.ifftn(a, axes=(0, 2)), Z),
    "rfft": (lambda x: fft.rfft(x), lambda a: np.fft.rfft(a), X),
    "rfft n": (lambda x: fft.rfft(x, n=9, dim=1), lambda a: np.fft.rfft(a, 9, 1), X),
    "irfft": (lambda x: fft.irfft(x), lambda a: np.fft.irfft(a), Z),
    "irfft n": (lambda x: fft.irfft(x, n=7, norm="ortho"),
                lambda a: np.fft.irfft(a, 7, norm="ortho"), Z),
    "rfft2": (lambda x: fft.rfft2(x, norm="forward"), lambda a: np.fft.rfft2(a, norm="forward"), X),
    "irfft2 s": (lambda x: fft.irfft2(x, s=(4, 5)), lambda a: np.fft.irfft2(a, s=(4, 5)), Z),
    "rfftn": (lambda x: fft.rfftn(x, dim=(2, 0)), lambda a: np.fft.rfftn(a, axes=(2, 0)), X),
    "irfftn": (lambda x: fft.irfftn(x), lambda a: np.fft.irfftn(a), Z),
    "hfft": (lambda x: fft.hfft(x), lambda a: np.fft.hfft(a), Z),
    "hfft n": (lambda x: fft.hfft(x, n=5, norm="ortho"),
               lambda a: np.fft.hfft(a, 5, norm="ortho"), Z),
    "ihfft": (lambda x: fft.ihfft(x, dim=1), lambda a: np.fft.ihfft(a, axis=1), X),
    # the n-D Hermitian transforms (they were missing): irfftn of the conjugate, times n, and
    # the conjugate of rfftn, divided by n
    "hfft2": (lambda x: fft.hfft2(x), lambda a: np.fft.irfftn(a.conj(), axes=(1, 2)) * 40, Z),
    "hfftn s": (lambda x: fft.hfftn(x, s=(3, 4, 7), norm="ortho"),
                lambda a: np.fft.irfftn(a.conj(), s=(3, 4, 7), norm="ortho"), Z),
    "ihfft2": (lambda x: fft.ihfft2(x, dim=(2, 0)),
               lambda a: np.fft.rfftn(a, axes=(2, 0)).conj() / 18, X),
    "ihfftn s": (lambda x: fft.ihfftn(x, s=(5, 4), norm="forward"),
                 lambda a: np.fft.rfftn(a, s=(5, 4), axes=(1, 2)).conj(), X),
}  # fmt: skip


@pytest.mark.parametrize("name", VALUES)
def test_values_are_the_transforms_asked_for(name):
    ours, numpy, a = VALUES[name]
    got = ours(tg.tensor(a))
    want = numpy(a)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got.numpy(), want, atol=1e-12)


@pytest.mark.parametrize("name", VALUES)
def test_gradients_match_finite_differences(name):
    ours, _, a = VALUES[name]
    check_grad(ours, a[:2, :3])


def test_dtypes_are_pytorchs():
    x32 = tg.tensor(X.astype(np.float32))
    for f in (fft.fft, fft.rfft, fft.ihfft, fft.fft2, fft.rfftn):
        assert f(x32).dtype == np.complex64
    for f in (fft.irfft, fft.hfft, fft.irfft2):
        assert f(fft.fft(x32)).dtype == np.float32
    assert fft.ifft(fft.fft(x32)).dtype == np.complex64
    ints = tg.tensor(np.arange(8))
    assert fft.fft(ints).dtype == np.complex64 and fft.rfft(ints).dtype == np.complex64
    np.testing.assert_allclose(fft.rfft(ints).numpy(), np.fft.rfft(np.arange(8)), atol=1e-5)
    assert fft.fftfreq(4).dtype == np.float32 and fft.rfftfreq(5, dtype=np.float64).dtype == "f8"


def test_frequencies_and_shifts():
    for n, d in ((8, 1.0), (7, 0.1)):
        np.testing.assert_allclose(fft.fftfreq(n, d, dtype=np.float64).numpy(),
                                   np.fft.fftfreq(n, d), rtol=1e-15)  # fmt: skip
        np.testing.assert_allclose(fft.rfftfreq(n, d, dtype=np.float64).numpy(),
                                   np.fft.rfftfreq(n, d), rtol=1e-15)  # fmt: skip
    np.testing.assert_array_equal(fft.fftshift(tg.tensor(Z)).numpy(), np.fft.fftshift(Z))
    np.testing.assert_array_equal(fft.fftshift(tg.tensor(Z), dim=(0, 2)).numpy(),
                                  np.fft.fftshift(Z, axes=(0, 2)))  # fmt: skip
    np.testing.assert_array_equal(fft.ifftshift(tg.tensor(X), dim=-1).numpy(),
                                  np.fft.ifftshift(X, axes=-1))  # fmt: skip
    odd = tg.tensor(np.arange(5.0))
    assert fft.ifftshift(fft.fftshift(odd)).tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    check_grad(lambda x: fft.fftshift(x, dim=1), Z[:2, :3])


def test_bad_arguments_say_what_is_wrong():
    z, x = tg.tensor(Z), tg.tensor(X)
    with pytest.raises(
        RuntimeError, match="rfft expects a real input tensor, but got torch.complex128"
    ):
        fft.rfft(z)
    with pytest.raises(RuntimeError, match='Invalid normalization mode: "unitary"'):
        fft.fft(x, norm="unitary")
    with pytest.raises(RuntimeError, match="FFT dims must be unique"):
        fft.fftn(x, dim=(0, -3))
    with pytest.raises(RuntimeError, match=r"Invalid number of data points \(0\) specified"):
        fft.fft(x, n=0)
    with pytest.raises(RuntimeError, match=r"Invalid number of data points \(0\) specified"):
        fft.irfft(z[..., :1])
    with pytest.raises(RuntimeError, match="dim and shape arguments must have the same length"):
        fft.fftn(x, s=(2, 2), dim=0)


# --- spectral layers, as public models write them -------------------------------------------


class SpectralConv2d(nn.Module):
    """The Fourier neural operator's layer (neuraloperator's fourier_2d.py): the lowest modes of
    rfft2 mixed by complex weights, the rest dropped, back by irfft2."""

    def __init__(self, channels: int, modes: int):
        super().__init__()
        self.modes, self.channels = modes, channels
        scale = 1 / (channels * channels)
        self.w1 = nn.Parameter(scale * tg.rand(channels, channels, modes, modes, dtype=tg.cdouble))
        self.w2 = nn.Parameter(scale * tg.rand(channels, channels, modes, modes, dtype=tg.cdouble))
        self.w = nn.Conv2d(channels, channels, 1, dtype=tg.float64)

    def forward(self, x: tg.Tensor) -> tg.Tensor:
        m = self.modes
        x_ft = fft.rfft2(x)
        out_ft = tg.zeros(x.shape[0], self.channels, x.size(-2), x.size(-1) // 2 + 1,
                          dtype=tg.cdouble)  # fmt: skip
        out_ft[:, :, :m, :m] = tg.einsum("bixy,ioxy->boxy", x_ft[:, :, :m, :m], self.w1)
        out_ft[:, :, -m:, :m] = tg.einsum("bixy,ioxy->boxy", x_ft[:, :, -m:, :m], self.w2)
        return tg.nn.functional.gelu(fft.irfft2(out_ft, s=(x.size(-2), x.size(-1))) + self.w(x))


class Mixing(nn.Module):
    """FNet's token mixing (the real part of a 2-D FFT over tokens and features), then GFNet's
    global filter (rfft2 times complex weights given as real pairs, back with irfft2)."""

    def __init__(self, tokens: tuple[int, int], dim: int):
        super().__init__()
        self.tokens = tokens
        a, b = tokens
        self.filter = nn.Parameter(0.02 * tg.randn(a, b // 2 + 1, dim, 2, dtype=tg.float64))
        self.norm = nn.LayerNorm(dim, dtype=tg.float64)
        self.out = nn.Linear(dim, 1, dtype=tg.float64)

    def forward(self, x: tg.Tensor) -> tg.Tensor:
        x = self.norm(x + fft.fft(fft.fft(x, dim=-1), dim=-2).real)
        n, _, d = x.shape
        z = fft.rfft2(x.reshape(n, *self.tokens, d), dim=(1, 2), norm="ortho")
        z = z * tg.view_as_complex(self.filter)
        z = fft.irfft2(z, s=self.tokens, dim=(1, 2), norm="ortho").reshape(x.shape)
        spectrum = fft.rfft(x, dim=1).abs().mean()  # a spectral loss's term
        return self.out(x + z).mean(1) + spectrum


def _train(make, shape, optimizer, backend, steps=3):
    """Losses and the state after `steps` steps written as PyTorch code writes them."""
    tg.manual_seed(0)
    model = make()
    opt = optimizer(model.parameters())
    x = tg.tensor(np.random.default_rng(1).standard_normal(shape))
    y = tg.tensor(np.random.default_rng(2).standard_normal((shape[0], 1)))

    def step(x, y):
        opt.zero_grad()
        out = model(x)
        loss = ((out.reshape(out.shape[0], -1)[:, :1] - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    run = step if backend is None else tg.trace(step, backend=backend)
    losses = [run(x, y).item() for _ in range(steps)]
    return losses, {k: v.numpy().copy() for k, v in model.state_dict().items()}


OPTIMIZERS = {"sgd": lambda p: tg.optim.SGD(p, lr=0.1, momentum=0.9),
              "adam": lambda p: tg.optim.Adam(p, lr=0.01),
              "adamw": lambda p: tg.optim.AdamW(p, lr=0.01, weight_decay=0.1)}  # fmt: skip


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
@pytest.mark.parametrize("layer", ["fno", "fnet"])
def test_spectral_layers_train_traced_as_eager(layer, optimizer, backend):
    make, shape = {"fno": (lambda: SpectralConv2d(3, 2), (2, 3, 6, 8)),
                   "fnet": (lambda: Mixing((3, 4), 5), (2, 12, 5))}[layer]  # fmt: skip
    losses, state = _train(make, shape, OPTIMIZERS[optimizer], None)
    assert losses[-1] < losses[0]
    traced_losses, traced_state = _train(make, shape, OPTIMIZERS[optimizer], backend)
    np.testing.assert_allclose(traced_losses, losses, rtol=1e-10)
    for k, v in state.items():
        assert traced_state[k].dtype == v.dtype
        np.testing.assert_allclose(traced_state[k], v, rtol=1e-9, atol=1e-12, err_msg=k)
    if layer == "fno":
        assert state["w1"].dtype == np.complex128


def _np_stft(x, n_fft, hop, window):
    """The short-time transform by hand: reflect-padded by n_fft // 2, framed, windowed."""
    x = np.pad(x, [(0, 0), (n_fft // 2, n_fft // 2)], mode="reflect")
    starts = range(0, x.shape[-1] - n_fft + 1, hop)
    frames = np.stack([x[:, s : s + n_fft] * window for s in starts], 1)
    return np.fft.rfft(frames).transpose(0, 2, 1)


def test_stft_and_istft_are_pytorchs():
    """torch.stft and torch.istft (they were missing): frames of a centred signal, windowed and
    transformed; istft inverts it; gradients by finite differences."""
    signal = rng.standard_normal((2, 30))
    window = np.hanning(10)[1:-1]  # 8 points, nonzero: the envelope never vanishes
    spec = tg.stft(tg.tensor(signal), 8, 3, window=tg.tensor(window), return_complex=True)
    np.testing.assert_allclose(spec.numpy(), _np_stft(signal, 8, 3, window), atol=1e-12)
    real = tg.stft(tg.tensor(signal), 8, 3, window=tg.tensor(window), return_complex=False)
    np.testing.assert_allclose(real.numpy(), tg.view_as_real(spec).numpy())
    back = tg.istft(spec, 8, 3, window=tg.tensor(window), length=30)
    np.testing.assert_allclose(back.numpy(), signal, atol=1e-12)
    check_grad(lambda x: tg.stft(x, 8, 3, window=tg.tensor(window), return_complex=True),
               signal[:1, :16])  # fmt: skip
    check_grad(lambda s: tg.istft(s, 8, 2, window=tg.tensor(window)), spec.numpy()[:1, :, :4])
    with pytest.raises(RuntimeError, match="return_complex"):
        tg.stft(tg.tensor(signal), 8)
