"""The trainer and what runs beside it (see :mod:`drmix.train.trainer`).

Importing a module of this package sets ``drmix.train`` to the package, over the lazily loaded entry point
:func:`drmix.api.train`; the package is therefore callable as that function (:class:`drmix.CallablePackage`), so
``drmix.train(config, ...)`` and ``from drmix import train`` train whatever was imported before."""
from __future__ import annotations

import sys

from drmix import CallablePackage

sys.modules[__name__].__class__ = CallablePackage
