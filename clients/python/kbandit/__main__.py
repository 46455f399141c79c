"""This file makes `python3 -m kbandit` the `kbandit` command line."""
import sys

from .cli import main

sys.exit(main())
