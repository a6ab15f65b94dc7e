"""Chaos runs of the whole loop: faults injected into the supervised stages, the invariants
checked over the run from the topics and the store (bench/chaos.py, docs/chaos.md).

- ``schedule``: the seeded fault schedule, printed and read back for a replay;
- ``injector``: the faults applied to the supervisor's children and the broker by name;
- ``prober``: `/score` asked twice a second, answered and failed counted;
- ``sampler``: each stage's memory, descriptors and threads, disk and topic sizes, growth;
- ``invariants``: what must hold over a run, pure functions over what it left;
- ``agreement``: two runs' discovered domains compared document by document;
- ``run``: one run of the loop under a schedule, its evidence and its figures.
"""
