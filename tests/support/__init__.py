"""Helpers and fixtures the tests share (a test folder's conftest imports the fixtures it
uses; no test imports another test module or a conftest):

- ``kafka``: topic readers and producers for the broker tests;
- ``processes``: whether a process ended; a `worx` child that blocks where a test kills it;
- ``http_raw``: raw-socket HTTP (malformed requests, timed answers);
- ``browser``: headless Chromium for the dashboard tests;
- ``s3``: a real S3-protocol server (moto) on 127.0.0.1;
- ``hostile_records``: the catalogue of hostile records per topic, and sending them;
- ``experts``: tiny trunks (fixtures), seeded experts, domain rows and tables of real texts;
- ``domains``: domain rows as discover promotes them;
- ``route_discover``: route + discover wired in process (no broker);
- ``trainer``: the trainer's tiny trunk (fixtures), corpus texts, jobs, a tiny pretraining;
- ``smallrun``: a small real run for the monitor (fixtures ``small_run``, ``run_copy``);
- ``histories``: hand-made evaluation histories;
- ``ingest_testdata``: a bad line of every dead-letter class, mixed files and their settings;
- ``reduced_loop``: the settings of the loop at reduced scale (end-to-end tests).
"""
