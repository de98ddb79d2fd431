"""The isolated reader process started by :func:`drmix.data.builders.localdocs.scan.collect_items`."""
from __future__ import annotations

import sys

from drmix.data.builders.localdocs.scan import _child_main

if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
