"""The op families, each beside its NumPy implementation. `tracegrad.core.primitives` gathers
their records into the one op table."""
