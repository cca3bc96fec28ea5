"""I/O adapters: storage (fsspec), DCP metadata reader, log sources, launcher."""
