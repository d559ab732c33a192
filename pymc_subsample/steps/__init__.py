"""PyMC step methods (thin classes over the engine, the proposals and the kernels)."""
