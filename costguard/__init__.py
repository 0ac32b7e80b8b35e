"""costguard: cloud cost governance for GPU and ML compute."""

__version__ = "0.1.0"
