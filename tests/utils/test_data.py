"""tracegrad.utils.data: datasets, samplers, DataLoader and collation, against PyTorch's
torch.utils.data where it is installed, and on their own."""

from __future__ import annotations

import collections
import warnings

import numpy as np
import pytest

import tracegrad as tg
from tracegrad.utils import data

X = np.arange(20.0).reshape(10, 2)
Y = np.arange(10)
Point = collections.namedtuple("Point", "x y")


def torch_or_skip():
    return pytest.importorskip("torch", reason="PyTorch is the oracle here; not installed")


def plain(batch):
    """A collated batch as nested Python values, with each tensor's dtype, for comparing
    tracegrad's batches with PyTorch's."""
    if isinstance(batch, tg.Tensor):
        return ("tensor", batch.dtype.name, batch.tolist())
    if type(batch).__module__.startswith("torch"):
        return ("tensor", str(batch.dtype).removeprefix("torch."), batch.tolist())
    if isinstance(batch, dict):
        return (type(batch).__name__, {k: plain(v) for k, v in batch.items()})
    if isinstance(batch, list | tuple):
        return (type(batch).__name__, [plain(v) for v in batch])
    return batch


def dataset():
    return data.TensorDataset(tg.tensor(X), tg.tensor(Y))


# --- collation ----------------------------------------------------------------------------------

BATCHES = {
    "tensors": lambda t: [t(X[0]), t(X[1])],
    "ndarrays": lambda t: [X[0].astype(np.float32), X[1].astype(np.float32)],
    "numpy scalars": lambda t: [np.int32(1), np.int32(2)],
    "ints": lambda t: [1, 2, 3],
    "floats": lambda t: [1.0, 2.5],
    "ints then floats": lambda t: [1, 2.5],
    "bools": lambda t: [True, False],
    "strings": lambda t: ["a", "b"],
    "tuples": lambda t: [(t(X[0]), 1), (t(X[1]), 2)],
    "lists": lambda t: [[1, 2.0], [3, 4.0]],
    "dicts": lambda t: [{"x": t(X[0]), "name": "a", "n": {"k": 1}}, {"x": t(X[1]), "name": "b",
                                                                      "n": {"k": 2}}],
    "ordered dicts": lambda t: [collections.OrderedDict(a=1), collections.OrderedDict(a=2)],
    "namedtuples": lambda t: [Point(1, 2.0), Point(3, 4.0)],
    "numpy strings": lambda t: [np.str_("a"), np.str_("b")],
    "numpy float64 scalars": lambda t: [np.float64(1.5), np.float64(2)],
}  # fmt: skip


@pytest.mark.parametrize("kind", BATCHES)
def test_default_collate_matches_pytorch(kind):
    torch = torch_or_skip()
    from torch.utils.data import default_collate

    ours = data.default_collate(BATCHES[kind](tg.tensor))
    theirs = default_collate(BATCHES[kind](torch.tensor))
    assert plain(ours) == plain(theirs)


def test_default_collate_makes_pytorchs_dtypes_and_structure():
    assert plain(data.default_collate([1.0, 2.5])) == ("tensor", "float64", [1.0, 2.5])
    assert plain(data.default_collate([1, 2])) == ("tensor", "int64", [1, 2])
    assert plain(data.default_collate([True, False])) == ("tensor", "bool", [True, False])
    assert data.default_collate([1, 2.5]).dtype == np.float32  # as torch.tensor([1, 2.5])
    assert data.default_collate([np.float32(1), np.float32(2)]).dtype == np.float32
    batch = data.default_collate([(tg.tensor([1.0]), 1, "a"), (tg.tensor([2.0]), 2, "b")])
    assert type(batch) is list and batch[0].shape == (2, 1) and batch[2] == ("a", "b")  # as PyTorch
    point = data.default_collate([Point(1, 2.0), Point(3, 4.0)])
    assert type(point) is Point and point.x.tolist() == [1, 3] and point.y.dtype == np.float64
    nested = data.default_collate([{"a": {"b": [1, 2]}}, {"a": {"b": [3, 4]}}])
    assert [t.tolist() for t in nested["a"]["b"]] == [[1, 3], [2, 4]]


class Box:
    def __init__(self, v):
        self.v = v


def box_collate(batch, *, collate_fn_map=None):
    return sum(b.v for b in batch)


@pytest.mark.parametrize("kind", ["exact", "subclass"])
def test_collate_with_an_extended_map_matches_pytorch(kind):
    """Custom collates add their types to `default_collate_fn_map` (PyTorch 1.13's API)."""
    torch = torch_or_skip()
    from torch.utils.data._utils.collate import collate as theirs_collate
    from torch.utils.data._utils.collate import default_collate_fn_map as theirs_map

    import tracegrad.torch as tgt

    cls = Box if kind == "exact" else type("SubBox", (Box,), {})
    ours_map = {**tgt.utils.data._utils.collate.default_collate_fn_map, Box: box_collate}
    batch = lambda t: [{"b": (cls(1), t(X[0]))}, {"b": (cls(2), t(X[1]))}]  # noqa: E731
    ours = tgt.utils.data._utils.collate.collate(batch(tg.tensor), collate_fn_map=ours_map)
    theirs = theirs_collate(batch(torch.tensor), collate_fn_map={**theirs_map, Box: box_collate})
    assert plain(ours) == plain(theirs) == ("dict", {"b": ("list", [3, plain(ours["b"][1])])})


def test_stack_dataset_matches_pytorch():
    torch = torch_or_skip()
    from torch.utils.data import DataLoader as TheirLoader
    from torch.utils.data import StackDataset as Theirs

    def batches(stack, loader, t, named):
        parts = (data.TensorDataset(t(X)), list("abcdefghij"))
        ds = stack(x=parts[0], y=parts[1]) if named else stack(*parts)
        return [plain(b) for b in loader(ds, batch_size=4)] + [plain(ds[3]), len(ds)]

    for named in (False, True):
        ours = batches(data.StackDataset, data.DataLoader, tg.tensor, named)
        assert ours == batches(Theirs, TheirLoader, torch.tensor, named)
        assert isinstance(ours[-2][1], dict) == named


def test_stack_dataset_refuses_what_pytorch_refuses():
    with pytest.raises(ValueError, match="size mismatch"):
        data.StackDataset(X, Y[:3])
    with pytest.raises(ValueError, match="not both"):
        data.StackDataset(X, y=Y)
    with pytest.raises(ValueError, match="at least one"):
        data.StackDataset()


def test_default_collate_keeps_the_gradient_of_stacked_tensors():
    x = tg.tensor(X[:2], requires_grad=True)
    data.default_collate([x[0], x[1]]).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.ones((2, 2)))


def test_default_collate_errors_as_pytorch():
    with pytest.raises(RuntimeError, match="each element in list of batch should be of equal size"):
        data.default_collate([[1, 2], [3]])
    with pytest.raises(TypeError, match="batch must contain tensors, numpy arrays, numbers"):
        data.default_collate([object(), object()])
    with pytest.raises(TypeError, match="found <U1"):
        data.default_collate([np.array(["a"]), np.array(["b"])])


def test_default_convert_matches_pytorch():
    torch_or_skip()
    from torch.utils.data import default_convert

    sample = (np.array([1, 2]), 3, 2.5, "s", {"a": np.float64(1.0)}, Point(np.ones(1), 1))
    ours, theirs = data.default_convert(sample), default_convert(sample)
    assert plain(ours) == plain(theirs)
    assert type(ours[5]) is Point


# --- the loader against PyTorch's ---------------------------------------------------------------


BATCHINGS = [(1, False), (3, False), (3, True), (5, True), (10, True), (11, True), (None, False)]


@pytest.mark.parametrize("batch_size, drop_last", BATCHINGS)
def test_loader_batches_match_pytorch(batch_size, drop_last):
    torch = torch_or_skip()
    from torch.utils.data import DataLoader, TensorDataset

    ours = data.DataLoader(dataset(), batch_size=batch_size, drop_last=drop_last)
    theirs = DataLoader(
        TensorDataset(torch.tensor(X), torch.tensor(Y)), batch_size=batch_size, drop_last=drop_last
    )
    assert len(ours) == len(theirs)
    assert [plain(b) for b in ours] == [plain(b) for b in theirs]


def test_a_shuffled_epoch_holds_every_sample_once_as_pytorchs():
    torch = torch_or_skip()
    from torch.utils.data import DataLoader, TensorDataset

    ours = data.DataLoader(dataset(), batch_size=4, shuffle=True)
    theirs = DataLoader(TensorDataset(torch.tensor(X), torch.tensor(Y)), batch_size=4, shuffle=True)
    assert [len(b[1]) for b in ours] == [len(b[1]) for b in theirs] == [4, 4, 2]
    assert sorted(i for b in ours for i in b[1].tolist()) == list(range(10))


FRACTIONS = [[0.3, 0.7], [0.3, 0.3, 0.4], [0.5, 0.5], [1 / 3] * 3, [0.25] * 4]
SPLITS = [(10, [3, 7]), (10, [10, 0])] + [(n, f) for n in (10, 11) for f in FRACTIONS]


@pytest.mark.parametrize("n, lengths", SPLITS)
def test_random_split_lengths_match_pytorch(n, lengths):
    torch_or_skip()
    from torch.utils.data import random_split

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = [len(s) for s in data.random_split(range(n), lengths)]
        theirs = [len(s) for s in random_split(range(n), lengths)]
    assert ours == theirs


def test_samplers_have_pytorchs_lengths():
    torch_or_skip()
    from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler

    for batch_size in (1, 3, 4, 10, 12):
        for drop_last in (False, True):
            ours = data.BatchSampler(data.SequentialSampler(range(10)), batch_size, drop_last)
            theirs = BatchSampler(SequentialSampler(range(10)), batch_size, drop_last)
            assert len(ours) == len(theirs) and list(ours) == list(theirs)
    for kwargs in [{}, {"num_samples": 25}, {"replacement": True, "num_samples": 7}]:
        ours = data.RandomSampler(range(10), **kwargs)
        assert len(ours) == len(list(ours)) == len(RandomSampler(range(10), **kwargs))


DATALOADER_MISUSE = [
    ({"sampler": [0, 1], "shuffle": True}, "mutually exclusive with shuffle"),
    ({"batch_sampler": [[0, 1]], "batch_size": 2}, "batch_sampler option is mutually exclusive"),
    ({"batch_sampler": [[0, 1]], "drop_last": True}, "batch_sampler option is mutually exclusive"),
    ({"batch_size": None, "drop_last": True}, "batch_size=None option disables auto-batching"),
    ({"num_workers": -1}, "num_workers option should be non-negative"),
    ({"prefetch_factor": 2}, "prefetch_factor option could only be specified"),
    ({"persistent_workers": True}, "persistent_workers option needs num_workers > 0"),
    ({"batch_size": 0}, "batch_size should be a positive integer value"),
]


@pytest.mark.parametrize("kwargs, message", DATALOADER_MISUSE)
def test_loader_refuses_what_pytorch_refuses(kwargs, message):
    with pytest.raises(ValueError, match=message):
        data.DataLoader(dataset(), **kwargs)
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset

    with pytest.raises(ValueError):
        DataLoader(TensorDataset(torch.tensor(X)), **kwargs)


# --- the loader on its own ----------------------------------------------------------------------


def test_batches_and_drop_last_counts():
    cases = [(3, False, [3, 3, 3, 1]), (3, True, [3, 3, 3]), (10, True, [10]), (11, True, []),
             (4, False, [4, 4, 2])]  # fmt: skip
    for batch_size, drop_last, sizes in cases:
        loader = data.DataLoader(dataset(), batch_size=batch_size, drop_last=drop_last)
        batches = list(loader)
        assert [len(b[0]) for b in batches] == sizes and len(loader) == len(sizes)
        assert all(type(b) is list and b[0].dtype == np.float64 for b in batches)
    x, y = next(iter(data.DataLoader(dataset(), batch_size=4)))
    np.testing.assert_array_equal(x.numpy(), X[:4])
    np.testing.assert_array_equal(y.numpy(), Y[:4])


def test_no_batching_yields_converted_samples():
    loader = data.DataLoader([(np.ones(2), 1), (np.zeros(2), 2)], batch_size=None)
    samples = list(loader)
    assert len(loader) == 2 and len(samples) == 2
    assert isinstance(samples[0][0], tg.Tensor) and samples[0][1] == 1  # a list, as PyTorch's


def test_the_same_seed_gives_the_same_order_and_each_epoch_a_new_one():
    def epochs(seed, n=3):
        loader = data.DataLoader(
            dataset(), batch_size=4, shuffle=True, generator=tg.Generator().manual_seed(seed)
        )
        return [[i for b in loader for i in b[1].tolist()] for _ in range(n)]

    first = epochs(0)
    assert epochs(0) == first and epochs(1) != first
    assert all(sorted(e) == list(range(10)) for e in first)
    assert first[0] != first[1]
    assert epochs(2**64 + 5) == epochs(5) and epochs(-1) == epochs(2**64 - 1)  # PyTorch's range


def test_without_a_generator_manual_seed_makes_shuffling_repeatable():
    def epoch():
        return [
            i for b in data.DataLoader(dataset(), batch_size=3, shuffle=True) for i in b[1].tolist()
        ]

    tg.manual_seed(7)
    first = epoch()
    tg.manual_seed(7)
    assert epoch() == first
    assert sorted(first) == list(range(10))


def test_generator_state_round_trips_and_defaults_to_a_fixed_seed():
    g = tg.Generator()
    assert g.initial_seed() == 67280421310721 == tg.Generator().initial_seed()  # PyTorch's
    assert g.device.type == "cpu" and g.manual_seed(3) is g and g.initial_seed() == 3
    state = g.get_state()
    assert isinstance(state, tg.Tensor) and state.dtype == np.uint8
    first = g.rng.permutation(10).tolist()
    assert g.set_state(state) is g and g.rng.permutation(10).tolist() == first
    assert tg.Generator().manual_seed(3).get_state().tolist() == state.tolist()
    seed = g.seed()
    assert g.initial_seed() == seed
    with pytest.raises(ValueError, match="tracegrad runs on the CPU"):
        tg.Generator(device="cuda")


def test_worker_options_and_pin_memory_are_taken():
    loader = data.DataLoader(dataset(), batch_size=4, num_workers=2, pin_memory=True,
                             persistent_workers=True, prefetch_factor=3)  # fmt: skip
    expected = [plain(b) for b in data.DataLoader(dataset(), batch_size=4)]
    assert [plain(b) for b in loader] == expected and loader.prefetch_factor == 3
    loader._workers.close()
    assert data.get_worker_info() is None


def test_user_samplers_batch_samplers_and_collate_fn():
    loader = data.DataLoader(dataset(), batch_size=2, sampler=[9, 8, 7])
    assert [b[1].tolist() for b in loader] == [[9, 8], [7]]
    loader = data.DataLoader(dataset(), batch_sampler=[[0, 5], [1]])
    assert [b[1].tolist() for b in loader] == [[0, 5], [1]] and len(loader) == 2
    loader = data.DataLoader(range(5), batch_size=2, collate_fn=lambda b: sum(b))
    assert list(loader) == [1, 5, 4]


def test_getitems_fetches_a_whole_batch_when_defined():
    class Batched(data.Dataset):
        calls = 0

        def __len__(self):
            return 6

        def __getitem__(self, i):
            raise AssertionError("__getitems__ should have been used")

        def __getitems__(self, indices):
            Batched.calls += 1
            return [float(i) for i in indices]

    assert [b.tolist() for b in data.DataLoader(Batched(), batch_size=4)] == [[0, 1, 2, 3], [4, 5]]
    assert Batched.calls == 2
    subset = data.Subset(Batched(), [5, 4])
    assert [b.tolist() for b in data.DataLoader(subset, batch_size=2)] == [[5.0, 4.0]]


class Stream(data.IterableDataset):
    def __init__(self, n, with_len=True):
        self.n, self.with_len = n, with_len

    def __iter__(self):
        return iter(range(self.n))

    def __len__(self):
        if not self.with_len:
            raise TypeError("no length")
        return self.n


def test_iterable_datasets_batch_in_stream_order():
    assert [b.tolist() for b in data.DataLoader(Stream(7), batch_size=3)] == [
        [0, 1, 2],
        [3, 4, 5],
        [6],
    ]
    loader = data.DataLoader(Stream(7), batch_size=3, drop_last=True)
    assert len(loader) == 2 and [b.tolist() for b in loader] == [[0, 1, 2], [3, 4, 5]]
    assert len(data.DataLoader(Stream(7), batch_size=3)) == 3
    assert list(data.DataLoader(Stream(3), batch_size=None)) == [0, 1, 2]
    with pytest.raises(ValueError, match="expected unspecified shuffle option"):
        data.DataLoader(Stream(3), shuffle=True)
    with pytest.raises(ValueError, match="expected unspecified sampler"):
        data.DataLoader(Stream(3), sampler=[0])
    chained = Stream(2) + Stream(3)
    assert isinstance(chained, data.ChainDataset) and list(chained) == [0, 1, 0, 1, 2]
    assert len(chained) == 5


def test_iterable_loader_lengths_match_pytorch():
    torch_or_skip()
    from torch.utils.data import DataLoader, IterableDataset

    class TorchStream(IterableDataset):
        def __iter__(self):
            return iter(range(7))

        def __len__(self):
            return 7

    for kwargs in [{"batch_size": 3}, {"batch_size": 3, "drop_last": True}, {"batch_size": None}]:
        ours, theirs = data.DataLoader(Stream(7), **kwargs), DataLoader(TorchStream(), **kwargs)
        assert len(ours) == len(theirs)
        assert [plain(b) for b in ours] == [plain(b) for b in theirs]


# --- datasets and samplers ------------------------------------------------------------------------


def test_random_split_lengths_fractions_and_errors():
    parts = data.random_split(range(10), [3, 7], generator=tg.Generator().manual_seed(0))
    assert [len(p) for p in parts] == [3, 7]
    assert sorted(list(parts[0]) + list(parts[1])) == list(range(10))
    again = data.random_split(range(10), [3, 7], generator=tg.Generator().manual_seed(0))
    assert list(again[0]) == list(parts[0])
    assert [len(p) for p in data.random_split(range(11), [0.5, 0.5])] == [6, 5]
    assert [len(p) for p in data.random_split(range(10), [1 / 3] * 3)] == [4, 3, 3]
    with pytest.warns(UserWarning, match="split at index 1 .* is empty"):
        data.random_split(range(2), [0.9, 0.1])
    with pytest.raises(ValueError, match="sum to 9, not to the dataset's length 10"):
        data.random_split(range(10), [3, 6])


def test_subset_concat_and_tensor_datasets():
    ds = dataset()
    assert len(ds) == 10 and ds[3][1].item() == 3
    with pytest.raises(ValueError, match="size mismatch between tensors"):
        data.TensorDataset(tg.tensor(X), tg.tensor(Y[:5]))
    sub = data.Subset(ds, [4, 2])
    assert len(sub) == 2 and sub[1][1].item() == 2
    both = data.Subset(range(5), [1, 2]) + data.Subset(range(5), [3])
    assert isinstance(both, data.ConcatDataset) and len(both) == 3
    assert [both[i] for i in range(3)] == [1, 2, 3] and both[-1] == 3 and both[-3] == 1
    assert both.cumulative_sizes == [2, 3]
    with pytest.raises(ValueError, match="should not exceed dataset length"):
        both[-4]
    with pytest.raises(IndexError):
        both[3]
    with pytest.raises(ValueError, match="empty iterable"):
        data.ConcatDataset([])
    with pytest.raises(TypeError, match="does not support IterableDataset"):
        data.ConcatDataset([Stream(2)])


def test_random_samplers():
    g = tg.Generator().manual_seed(0)
    blocks = list(data.RandomSampler(range(4), num_samples=10, generator=g))
    assert sorted(blocks[:4]) == sorted(blocks[4:8]) == [0, 1, 2, 3] and len(blocks) == 10
    drawn = list(data.RandomSampler(range(3), replacement=True, num_samples=50, generator=g))
    assert len(drawn) == 50 and set(drawn) == {0, 1, 2}
    assert sorted(data.SubsetRandomSampler([7, 8, 9], generator=g)) == [7, 8, 9]
    weighted = list(data.WeightedRandomSampler([0.0, 1.0, 3.0], 200, generator=g))
    assert 0 not in weighted and weighted.count(2) > weighted.count(1)
    assert sorted(data.WeightedRandomSampler([1, 1, 0, 1], 3, replacement=False)) == [0, 1, 3]
    with pytest.raises(ValueError, match="without replacement"):
        data.WeightedRandomSampler([1, 0], 2, replacement=False)
    with pytest.raises(ValueError, match="num_samples should be a positive integer"):
        data.RandomSampler(range(3), num_samples=0)
    with pytest.raises(TypeError, match="replacement should be a boolean"):
        data.RandomSampler(range(3), replacement=1)
    with pytest.raises(ValueError, match="drop_last should be a boolean"):
        data.BatchSampler(range(3), 2, drop_last=None)


def test_a_traced_step_trains_on_batches_as_the_eager_step():
    """Batches come from outside the step; the smaller last batch is a second signature."""
    features = np.random.default_rng(0).standard_normal((10, 3)).astype(np.float32)
    ds = data.TensorDataset(tg.tensor(features), tg.tensor(Y % 2))

    def train(traced):
        tg.nn.manual_seed(0)
        model = tg.nn.Linear(3, 2)
        opt = tg.optim.SGD(model.parameters(), lr=0.1)

        def step(x, y):
            loss = tg.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss

        step = tg.trace(step, backend="numpy") if traced else step
        loader = data.DataLoader(ds, batch_size=4, shuffle=True, generator=tg.Generator())
        return [step(x, y).item() for _ in range(2) for x, y in loader]

    np.testing.assert_allclose(train(True), train(False), rtol=1e-6)


@pytest.mark.parametrize("replicas, drop_last", [(3, False), (3, True), (4, False), (12, False)])
def test_distributed_samplers_share_the_dataset_as_pytorchs_do(replicas, drop_last):
    from tracegrad.utils.data import DistributedSampler

    data = list(range(10))
    shares = [list(DistributedSampler(data, replicas, r, shuffle=False, drop_last=drop_last))
              for r in range(replicas)]  # fmt: skip
    assert len({len(s) for s in shares}) == 1  # equal shares
    flat = sorted(i for s in shares for i in s)
    if drop_last:
        assert len(set(flat)) == len(flat) and len(flat) == 10 - 10 % replicas
    else:
        assert set(flat) == set(data) and len(flat) == -(-10 // replicas) * replicas
    assert shares[1][0] == 1 and shares[0][1:2] == ([replicas] if replicas < 10 else [])
    try:
        from torch.utils.data.distributed import DistributedSampler as Theirs
    except ImportError:
        return
    assert shares == [list(Theirs(data, replicas, r, shuffle=False, drop_last=drop_last))
                      for r in range(replicas)]  # fmt: skip


def test_a_shuffled_distributed_sampler_agrees_across_ranks_and_epochs_differ():
    from tracegrad.utils.data import DistributedSampler

    samplers = [DistributedSampler(range(20), 2, r, seed=5) for r in range(2)]
    first = [list(s) for s in samplers]
    assert sorted(first[0] + first[1]) == list(range(20))  # one order, split between the ranks
    for s in samplers:
        s.set_epoch(1)
    assert [list(s) for s in samplers] != first
    with pytest.raises(ValueError, match="Invalid rank 2"):
        DistributedSampler(range(4), 2, 2)
    with pytest.raises(RuntimeError, match="tracegrad.distributed.init"):
        DistributedSampler(range(4))


def test_the_collate_files_patterns_and_messages():
    """monai's collate reuses PyTorch's test of arrays that cannot become tensors."""
    from tracegrad.torch.utils.data._utils.collate import (
        default_collate_err_msg_format,
        np_str_obj_array_pattern,
    )

    assert np_str_obj_array_pattern.search(np.array(["a"]).dtype.str)
    assert not np_str_obj_array_pattern.search(np.zeros(1).dtype.str)
    assert "found <class 'set'>" in default_collate_err_msg_format.format(set)
