"""The front end: `Tensor` (tensor.py) and its methods (methods.py, attached from one table),
the functions with PyTorch's meanings that the top level exports (functions, reductions,
sorting, rearrange, products, elementwise, creation, linalg), the tape and its backward engine,
GradManager, the tracer and the random state. It gives the core's op table its meaning (calling
an op binds it)."""
