"""Sparse COO tensors (`frontend.sparse`) as graph networks use them: built from edges (with
repeats), multiplied into dense features every way PyTorch spells it, against NumPy's dense
products; gradients in the values and the dense operand against finite differences; coalescing;
a GCN's training step compiled as eager; pyGAT's sparse product inside an autograd.Function."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad.torch as torch
from tests.conftest import check_grad
from tracegrad.frontend.sparse import SparseCOO

INDICES = np.array([[0, 1, 1, 2, 0, 3], [1, 0, 2, 1, 1, 3]])  # (0, 1) twice
VALUES = np.array([1.0, 2.0, 3.0, 4.0, 5.0, -1.0])
SHAPE = (4, 4)


def dense_of(indices, values, shape):
    out = np.zeros(shape)
    np.add.at(out, tuple(indices), values)
    return out


def adjacency(dtype=torch.float64):
    return torch.sparse_coo_tensor(torch.tensor(INDICES), torch.tensor(VALUES, dtype=dtype), SHAPE)


def test_built_from_edges_with_repeats_added():
    want = dense_of(INDICES, VALUES, SHAPE)
    s = adjacency()
    assert isinstance(s, SparseCOO) and s.is_sparse and s.layout is torch.sparse_coo
    assert torch.ones(2).layout is torch.strided and not torch.ones(2).is_sparse
    assert s.shape == SHAPE and s._nnz() == 6 and s.dtype == np.float64
    np.testing.assert_array_equal(s.to_dense().numpy(), want)
    legacy = torch.sparse.FloatTensor(
        torch.tensor(INDICES), torch.tensor(VALUES), torch.Size(SHAPE)
    )
    assert legacy.dtype == np.float32
    np.testing.assert_array_equal(legacy.to_dense().numpy(), want)
    inferred = torch.sparse_coo_tensor(torch.tensor(INDICES), torch.tensor(VALUES))
    assert inferred.shape == (4, 4)


def test_products_every_way_they_are_spelled():
    a = dense_of(INDICES, VALUES, SHAPE)
    x = np.random.default_rng(0).standard_normal((4, 3))
    s, d = adjacency(), torch.tensor(x)
    for got in (torch.spmm(s, d), torch.sparse.mm(s, d), torch.mm(s, d), torch.matmul(s, d),
                s @ d, s.matmul(d), s.mm(d)):  # fmt: skip
        np.testing.assert_allclose(got.numpy(), a @ x, rtol=1e-14)
    np.testing.assert_allclose((d.t() @ s).numpy(), x.T @ a, rtol=1e-14)
    np.testing.assert_allclose(s.t().matmul(d).numpy(), a.T @ x, rtol=1e-14)
    np.testing.assert_allclose((s @ d[:, 0]).numpy(), a @ x[:, 0], rtol=1e-14)
    np.testing.assert_allclose((2.0 * s).to_dense().numpy(), 2 * a)


def test_gradients_in_the_values_and_the_dense_operand():
    x = np.random.default_rng(1).standard_normal((4, 3))
    check_grad(lambda v, d: torch.sparse_coo_tensor(torch.tensor(INDICES), v, SHAPE) @ d,
               VALUES, x)  # fmt: skip
    check_grad(lambda v: torch.sparse_coo_tensor(torch.tensor(INDICES), v, SHAPE).to_dense(),
               VALUES)  # fmt: skip


def test_a_dense_tensor_with_a_sparse_operand_is_dense():
    """pytorch/examples' gcn and gat add self-loops as `torch.eye(V) + adj` (an int64 sparse
    adjacency): PyTorch's result is dense, float32 by promotion."""
    a = dense_of(INDICES, VALUES, SHAPE)
    ints = torch.sparse_coo_tensor(torch.tensor(INDICES), torch.ones(6), SHAPE, dtype=torch.int64)
    loops = torch.eye(4) + ints
    assert type(loops) is torch.Tensor and loops.dtype == torch.float32
    np.testing.assert_array_equal(loops.numpy(), np.eye(4) + dense_of(INDICES, np.ones(6), SHAPE))
    d = torch.tensor(np.arange(16.0).reshape(4, 4))
    for got, want in ((d - adjacency(), d.numpy() - a), (d * adjacency(), d.numpy() * a),
                      (torch.add(d, adjacency()), d.numpy() + a)):  # fmt: skip
        np.testing.assert_array_equal(got.numpy(), want)
    edges = torch.tensor(INDICES)
    check_grad(lambda v: torch.ones(4, 4) + torch.sparse_coo_tensor(edges, v, SHAPE), VALUES)


def test_coalesce_sorts_and_adds_repeats():
    s = adjacency()
    with pytest.raises(RuntimeError, match="coalesce"):
        s.values()
    c = s.coalesce()
    assert c.is_coalesced() and c._nnz() == 5
    np.testing.assert_array_equal(c.indices().numpy(), [[0, 1, 1, 2, 3], [1, 0, 2, 1, 3]])
    np.testing.assert_array_equal(c.values().numpy(), [6.0, 2.0, 3.0, 4.0, -1.0])
    np.testing.assert_array_equal(c.to_dense().numpy(), s.to_dense().numpy())


def test_to_sparse_and_sums():
    a = dense_of(INDICES, VALUES, SHAPE)
    s = torch.tensor(a).to_sparse()
    np.testing.assert_array_equal(s.to_dense().numpy(), a)
    assert s._nnz() == np.count_nonzero(a)
    assert float(torch.sparse.sum(adjacency())) == VALUES.sum()
    np.testing.assert_array_equal(torch.sparse.sum(adjacency(), dim=(0, 1)).numpy(), VALUES.sum())
    rows = torch.sparse.sum(adjacency(), dim=1)
    assert isinstance(rows, SparseCOO)
    np.testing.assert_array_equal(rows.to_dense().numpy(), a.sum(1))


class GCN(torch.nn.Module):
    """pygcn's two graph convolutions: relu(A X W1) then A H W2, log-softmax."""

    def __init__(self):
        super().__init__()
        self.w1 = torch.nn.Parameter(torch.randn(5, 8, dtype=torch.float64) * 0.3)
        self.w2 = torch.nn.Parameter(torch.randn(8, 3, dtype=torch.float64) * 0.3)

    def forward(self, x, adj):
        h = torch.relu(torch.spmm(adj, x @ self.w1))
        return torch.log_softmax(torch.spmm(adj, h @ self.w2), dim=1)


def test_a_gcn_step_compiled_as_eager():
    x = torch.randn(4, 5, dtype=torch.float64)
    labels = torch.tensor([0, 2, 1, 2])
    adj = adjacency()

    def train(compiled):
        torch.manual_seed(0)
        model = GCN()
        opt = torch.optim.SGD(model.parameters(), lr=0.2)

        def step():
            opt.zero_grad()
            loss = torch.nn.functional.nll_loss(model(x, adj), labels)
            loss.backward()
            opt.step()
            return loss.detach()

        run = torch.compile(step) if compiled else step
        return [float(run()) for _ in range(4)]

    np.testing.assert_allclose(train(compiled=True), train(compiled=False), rtol=1e-12)


class SpecialSpmm(torch.autograd.Function):
    """pyGAT's sparse product: the sparse matrix saved for backward, its gradient read at the
    entries' coordinates (`_indices()`), the dense one through the transpose."""

    @staticmethod
    def forward(ctx, indices, values, shape, b):
        a = torch.sparse_coo_tensor(indices, values, shape)
        ctx.save_for_backward(a, b)
        ctx.N = shape[0]
        return torch.matmul(a, b)

    @staticmethod
    def backward(ctx, grad_output):
        a, b = ctx.saved_tensors
        edge = a._indices()[0, :] * ctx.N + a._indices()[1, :]
        grad_values = grad_output.matmul(b.t()).view(-1)[edge]
        return None, grad_values, None, a.t().matmul(grad_output)


def test_a_sparse_product_in_an_autograd_function():
    values = torch.tensor(VALUES, requires_grad=True)
    b = torch.randn(4, 2, dtype=torch.float64, requires_grad=True)
    SpecialSpmm.apply(torch.tensor(INDICES), values, torch.Size(SHAPE), b).sum().backward()
    values2, b2 = torch.tensor(VALUES, requires_grad=True), b.detach().clone().requires_grad_()
    (torch.sparse_coo_tensor(torch.tensor(INDICES), values2, SHAPE) @ b2).sum().backward()
    np.testing.assert_allclose(values.grad.numpy(), values2.grad.numpy(), rtol=1e-14)
    np.testing.assert_allclose(b.grad.numpy(), b2.grad.numpy(), rtol=1e-14)
