"""chaosbench: fault-injection harness for elastic distributed PyTorch training."""
__version__ = "0.1.0"
