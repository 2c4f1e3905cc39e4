"""Peak-traffic rehearsal (Locust), benchmarks against baselines, and capacity planning."""
