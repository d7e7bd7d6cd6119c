"""harness: regression bisection and verification of sequence packing in Megatron-Bridge."""

__version__ = "0.1.0"
