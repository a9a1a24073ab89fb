"""``python -m engine``: the command line.

Once the command returned, the process exits without the interpreter's final garbage
collection (``gc.freeze``): every shutdown step is done by then, and that collection walks every
object a runner's caches left behind, which took 5 s of a replica's termination grace period on
a loaded machine.
"""

from __future__ import annotations

import gc
import sys

from .cli import main

if __name__ == "__main__":
    code = main(sys.argv[1:])
    gc.freeze()
    sys.exit(code)
