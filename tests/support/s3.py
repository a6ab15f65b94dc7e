"""A real S3-protocol server for the object-store tests: moto's server on 127.0.0.1.

``with S3Server() as s3:`` starts it on a free loopback port (a real HTTP server in a
thread of this process; other processes reach it by ``s3.env``) and stops it on exit.
"""

from __future__ import annotations

import uuid
from typing import Any

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "worx-test",
    "AWS_SECRET_ACCESS_KEY": "worx-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}


class S3Server:
    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.endpoint = ""

    @property
    def env(self) -> dict[str, str]:
        """What a process needs to reach this server (boto3 reads these itself)."""
        return {**CREDENTIALS, "AWS_ENDPOINT_URL": self.endpoint}

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region_name=CREDENTIALS["AWS_DEFAULT_REGION"],
        )

    def new_bucket(self) -> str:
        name = f"worx-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def __enter__(self) -> S3Server:
        self._server.start()  # port 0: the system picks a free one
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()
