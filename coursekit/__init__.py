"""Tooling of the Rust-for-PyTorch-developers course kit."""
