"""Wiring only: how the stages (ingest, router, experts, trainer, monitor) run on Kafka.

- ``composition/``: what everything is built from: the worx.toml config, paths, topics,
  Kafka clients, the embedded broker, the composition roots, the run directory;
- ``runtimes/``: the plain confluent-kafka runtime of each stage (batch runner, discover's
  snapshot + outbox, the trainer's worker) and its parts (publisher, table follower,
  range reader);
- ``serve/``: what `worx serve` runs: the HTTP API and the hot registration of experts;
- ``faust/``: the Faust runtime (one app, one agent per stage);
- ``flink/``: the PyFlink runtime (route and discover as one Flink job), in its own venv;
- ``loop/``: the whole loop as supervised processes (`worx demo`, `worx up`) and its views;
- ``commands/``: the `worx` command line, one module per subcommand;
- ``chaos/``: the loop run under injected faults, and the invariants over the run
  (bench/chaos.py, the CI-sized test in tests/e2e/test_chaos.py).
"""
