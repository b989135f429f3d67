"""The runtime: `@trace` (plans per signature, guards), plan building, the arena and measured
runs, background lowering, reports and pictures."""
