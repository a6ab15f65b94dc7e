"""Where the bundled default trunk is: the names of :mod:`worx.bundled` under which the
serving, trainer and CLI code imports them.

Examples
--------
>>> default_trunk_dir().name
'trunk'
"""

from __future__ import annotations

from worx.bundled import DATA_DIR_ENV
from worx.bundled import corpus_dir as default_corpus_dir
from worx.bundled import data_dir as bundled_data_dir
from worx.bundled import trunk_dir as default_trunk_dir

__all__ = ["DATA_DIR_ENV", "bundled_data_dir", "default_corpus_dir", "default_trunk_dir"]
