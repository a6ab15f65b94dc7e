"""The plain confluent-kafka runtime of each stage, and the parts they share.

- ``stage_runner``: the batch runtime that feeds any stage object, at least once
  (route, connect, monitor), and the dead-letter helpers every runtime uses;
- ``discover_runner``: discover's snapshot-plus-outbox runtime (one instance);
- ``train_worker``: the trainer's runtime, ``worx.train`` one job at a time;
- ``range_reader``: a TrainJob's documents read from ``worx.docs`` by reference;
- ``publisher``: the one publish step: produce, flush, raise if undelivered;
- ``table_follower``: a compacted table topic followed whole from a thread;
- ``expert_registrations``: ``worx.experts`` applied to discover's domain rows.
"""
