"""The core: errors, the IR (graphs of op applications) and the op vocabulary with every op's
NumPy implementation. It imports NumPy only; everything else stands on it."""
