"""The compiler: lowering an optimized graph (the one place a plan's route is decided), Python
code generation, and the Numba kernels. It sees only the core (and the `passes` package)."""
