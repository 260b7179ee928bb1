"""A tiny shop: carts, prices and a discount rule (deliberately buggy, for the benchmark)."""
