"""Where the bundled data lives: the default trunk (``data/trunk``) and the corpus.

``data/`` is not a Python package: it sits at the repository root beside the packages
(``experts/``, ``trainer/``, ...). With the editable install the project uses
(``pip install -e .``), ``experts/`` is imported from the repository itself, so the
repository root is the parent of this file's folder. A non-editable install does not carry
``data/``; then ``$WORX_BUNDLED_DATA`` names the folder that holds ``trunk/`` and ``corpus/``,
and failing that ``./data`` (a checkout as the working directory) is tried.

Examples
--------
>>> default_trunk_dir().name
'trunk'
"""

from __future__ import annotations

import os
from pathlib import Path

DATA_DIR_ENV = "WORX_BUNDLED_DATA"


def bundled_data_dir() -> Path:
    """The folder holding the bundled ``trunk/`` and ``corpus/``.

    Resolution order: ``$WORX_BUNDLED_DATA``; ``<repository root>/data`` (editable install);
    ``./data``. The first that exists wins.

    Raises
    ------
    FileNotFoundError
        If none of them exists, with the places tried and how to fix it.
    """
    tried: list[Path] = []
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        tried.append(Path(env).expanduser())
    tried.append(Path(__file__).resolve().parent.parent / "data")
    tried.append(Path.cwd() / "data")
    for candidate in tried:
        if candidate.is_dir():
            return candidate.resolve()
    raise FileNotFoundError(
        "the bundled data folder (data/ with trunk/ and corpus/) was not found; tried "
        + ", ".join(str(p) for p in tried)
        + f". Install the project editable from a checkout (pip install -e .), or set "
        f"${DATA_DIR_ENV} to the checkout's data/ folder"
    )


def default_trunk_dir() -> Path:
    """The bundled default trunk: a Hugging Face model directory (``data/trunk``).

    Load it like any trunk, e.g.
    ``AutoModelForCausalLM.from_pretrained(default_trunk_dir(), dtype=torch.float32)``
    (the weights are stored in float16 to stay small; ask for float32 on CPU).

    Raises
    ------
    FileNotFoundError
        If the data folder cannot be found (see :func:`bundled_data_dir`).
    """
    return bundled_data_dir() / "trunk"


def default_corpus_dir() -> Path:
    """The bundled labelled corpus (``data/corpus/*.jsonl.gz``)."""
    return bundled_data_dir() / "corpus"
