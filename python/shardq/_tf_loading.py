"""Loads the native module beside an already imported TensorFlow.

TensorFlow's wheel exports its own copies of abseil and protobuf to the
whole process. Loaded after it, shardq's module would bind to those copies
instead of the ones it was built with, and crash on its first call (``import
tensorflow`` then ``import shardq``; bench/interop/run checks that order).
So when TensorFlow is already loaded, the module is loaded with
RTLD_DEEPBIND: it and its libraries resolve their symbols among themselves
first. Imported by shardq/__init__.py just before ``_shardq``.
"""
import os
import sys

if "tensorflow" in sys.modules and hasattr(os, "RTLD_DEEPBIND"):
    _flags = sys.getdlopenflags()
    sys.setdlopenflags(_flags | os.RTLD_DEEPBIND)
    try:
        from shardq import _shardq  # noqa: F401
    finally:
        sys.setdlopenflags(_flags)
