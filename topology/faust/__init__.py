"""The Faust runtime of the stream.

- ``app``: one Faust app, with the agents asked for, settings chosen for the embedded broker;
- ``agents``: one agent module per stage (normalise, route, discover) and their contract.
"""
