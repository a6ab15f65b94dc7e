"""What every command and runtime is built from, resolved once from the configuration.

- ``worx_config``: worx.toml + WORX_* overrides, loaded into the typed per-stage sections;
- ``paths``: where every command finds the trunk and keeps its state;
- ``expert_store``: the expert store a command opens (a directory, or a bucket + cache);
- ``assemble``: the composition roots: the server, the monitor and the trainer's parts;
- ``topics``: every topic of the loop, declared once, and their creation;
- ``kafka_clients``: confluent-kafka clients with the at-least-once discipline;
- ``embedded_broker``: the embedded Kafka-compatible broker (Tansu), started and stopped;
- ``run_dir``: what a finished run leaves behind, and how read-only commands open it.
"""
