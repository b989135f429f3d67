"""The front end: `Tensor`, the tape and its backward engine, GradManager, the tracer and the
random state. It gives the core's op table its meaning (calling an op binds it)."""
