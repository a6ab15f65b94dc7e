"""The whole loop as supervised processes: what `worx demo` and `worx up` start and show.

- ``supervisor``: child processes started, restarted when they crash, stopped on exit;
- ``orchestrate``: every stage of the loop started as a supervised process;
- ``watcher``: a read-only view of the loop, following every worx topic from the start;
- ``live_view``: the terminal view of the running loop (rich);
- ``demo_run``: `worx demo`'s run: the bundled corpus streamed through the loop;
- ``keep_serving``: `worx demo --keep-serving`: a finished run served from its files.
"""
