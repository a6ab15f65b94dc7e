"""Parts of the PyFlink runtime (:mod:`topology.flink_job`): the discover journal, the Kafka
tables, the Flink functions around the stage objects, checkpoint lookup.

Only :mod:`topology.flink.functions`, :mod:`topology.flink.tables` and the job import
pyflink; the rest runs in the core venv too.
"""

INSTALL_HINT = (
    "install the Flink runtime in its own venv: python3 -m venv .venv-flink && "
    '. .venv-flink/bin/activate && pip install torch==2.13.0 -e ".[flink,dev]" '
    '-c constraints-flink.txt (README "Flink")'
)


def require_pyflink() -> None:
    """Raise :class:`worx.errors.UserError` with the install command if pyflink is absent."""
    import importlib.util

    from worx.errors import UserError

    if importlib.util.find_spec("pyflink") is None:
        raise UserError(
            "the Flink runtime needs apache-flink, which is not installed", INSTALL_HINT
        )
