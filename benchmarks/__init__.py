"""sro's speed and memory figures. Run all with `make bench` (or `python -m benchmarks [NAME...]`)."""
