"""Online sentiment classification on Ray Serve."""

__version__ = "0.1.0"
