"""This file contains the version of the kbandit client package (read by pyproject.toml)."""
__version__ = "0.1.0"
