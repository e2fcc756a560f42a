"""Benchmarks: offline (reference engine over prompt sets); the serving benchmark joins later."""
