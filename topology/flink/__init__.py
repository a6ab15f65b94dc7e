"""The PyFlink runtime: route and discover as one Flink job (in the Flink venv).

- ``job``: the job itself (`worx flink run`, `flink run -py topology/flink/job.py`);
- ``functions``: the Flink functions around the route and discover stage objects;
- ``kafka_tables``: the Kafka topics as Flink SQL tables (the connector's table form);
- ``journal``: discover's state as Flink managed state: its snapshot plus a journal;
- ``ordering``: discover's input in one order whatever the parallelism (a lane merge);
- ``checkpoints``: where the job keeps its checkpoints and which one a restart restores.

Only :mod:`topology.flink.functions`, :mod:`topology.flink.kafka_tables` and the job import
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
